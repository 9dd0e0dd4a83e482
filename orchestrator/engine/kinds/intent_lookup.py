"""The lookup: after a create whose outcome is unknown, did the provider create our intent?

Listing intents by creation time is strongly consistent (Stripe's search is not: absence in
search proves nothing, so it is never used here).  The scan is bounded three ways:

* **window**: ``[first create - margin, latest create + provider timeout + margin]``, from
  create attempts stamped on the record with the database clock.  Our intent can only have
  been created while one of our creates was at the provider; the margin covers Stripe's
  clock against ours.  Intents outside the window are never read, however busy the account.
* **pages per attempt**: after ``lookup_pages_per_attempt`` pages the task hands the rest to
  a later attempt, which resumes from the cursor stored on the record (the lease is renewed
  and the cursor saved before every page, so a kill or a time limit mid-scan loses at most
  the page in flight).
* **attempts**: the claims and unknown outcomes of the record, as for every step.

Verdicts::

    FOUND        an intent that names our record AND matches it (amount, currency, customer,
                 capture method, payment method): adopt it
    ABSENT       the whole window was read, no intent names our record
    FOREIGN_ONLY the whole window was read, intents name our record but none matches: not
                 ours, never confirmed, kept on the record for ops
    UNFINISHED   the page budget ran out: the next attempt resumes from the cursor

After ABSENT or FOREIGN_ONLY the worker re-sends the *same* create key (always safe: it
replays our intent, answers 409 while our first create is still executing, or creates
ours) and counts the unknown outcome; out of attempts, the payment parks and names the
rejected intents.  Neither verdict proves our create will never land: the provider may
still be executing a request the client gave up on.

A failed page (timeout, 5xx, 429) raises the provider's error to the caller: an unknown
outcome, never "absent".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.engine.kinds.intent_match import ExpectedIntent, intent_mismatches, reject
from orchestrator.providers.base import PaymentProvider, ProviderIntent
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

PAGE_SIZE = 100  # Stripe's maximum: fewer round trips


class Verdict(StrEnum):
    FOUND = "found"
    ABSENT = "absent"
    FOREIGN_ONLY = "foreign_only"
    UNFINISHED = "unfinished"


@dataclass(frozen=True)
class LookupWindow:
    """Provider ``created`` timestamps (seconds), both ends included."""

    created_gte: int
    created_lte: int


def lookup_window(
    first_create_at: datetime,
    last_create_at: datetime,
    *,
    margin_seconds: float,
    call_seconds: float,
) -> LookupWindow:
    """The only times at which the provider can have created our intent, with a margin."""
    return LookupWindow(
        created_gte=int(first_create_at.timestamp() - margin_seconds),
        created_lte=int(last_create_at.timestamp() + call_seconds + margin_seconds) + 1,
    )


@dataclass
class LookupResult:
    verdict: Verdict
    intent: ProviderIntent | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)


# Called before every page: renew the lease and store (cursor, pages read, rejected) on the
# record.  It raises to stop the scan (fenced out, time budget spent).
SaveProgress = Callable[[str | None, int, list[dict[str, Any]]], None]


def _merge(rejected: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in rejected if r.get("id") != entry["id"]] + [entry]


def scan_for_intent(
    provider: PaymentProvider,
    expected: ExpectedIntent,
    window: LookupWindow,
    *,
    cursor: str | None,
    pages_read: int,
    rejected: list[dict[str, Any]],
    page_budget: int,
    save: SaveProgress,
) -> LookupResult:
    """Read at most ``page_budget`` pages of the window from ``cursor`` (None: the top)."""
    rejected = list(rejected)
    for _ in range(page_budget):
        save(cursor, pages_read, rejected)
        page = provider.list_intents(
            created_gte=window.created_gte,
            created_lte=window.created_lte,
            starting_after=cursor,
            limit=PAGE_SIZE,
        )
        pages_read += 1
        for intent in page.intents:
            if intent.metadata.get(RECORD_ID_METADATA_KEY) != expected.record_id:
                continue
            problems = intent_mismatches(intent, expected)
            if not problems:
                return LookupResult(Verdict.FOUND, intent, rejected)
            rejected = _merge(rejected, reject(intent, problems).to_json())
        if not page.has_more or not page.intents:
            verdict = Verdict.FOREIGN_ONLY if rejected else Verdict.ABSENT
            return LookupResult(verdict, None, rejected)
        cursor = page.intents[-1].id
    save(cursor, pages_read, rejected)
    return LookupResult(Verdict.UNFINISHED, None, rejected)
