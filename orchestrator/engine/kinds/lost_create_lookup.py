"""The lookup: after a create whose outcome is unknown, did the provider create our payment?

Listing provider payments by creation time is strongly consistent (the provider's search is
not: absence in search proves nothing, so it is never used here).  The scan is bounded three ways:

* **window**: ``[first create - margin, latest create + provider timeout + margin]``, from
  create attempts stamped on the record with the database clock.  Our provider payment can only have
  been created while one of our creates was at the provider; the margin covers the provider's
  clock against ours.  Provider payments outside the window are never read, however busy the
  account.
* **pages per attempt**: after ``lookup_pages_per_attempt`` pages the task hands the rest to
  a later attempt, which resumes from the cursor stored on the record (the lease is renewed
  and the cursor saved before every page, so a kill or a time limit mid-scan loses at most
  the page in flight).
* **attempts**: the claims and unknown outcomes of the record, as for every step.

Verdicts::

    FOUND        a provider payment that names our record AND matches it (amount,
                 currency, customer, capture method, payment method): adopt it
    ABSENT       the whole window was read, no provider payment names our record
    FOREIGN_ONLY the whole window was read, provider payments name our record but none matches: not
                 ours, never confirmed, kept on the record for ops
    UNFINISHED   the page budget ran out: the next attempt resumes from the cursor

After ABSENT or FOREIGN_ONLY the worker re-sends the *same* create key (always safe: it
replays our provider payment, answers 409 while our first create is still executing, or creates
ours) and counts the unknown outcome; out of attempts, the payment parks and names the
rejected provider payments.  Neither verdict proves our create will never land: the provider may
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

from orchestrator.engine.kinds.payment_match import ExpectedPayment, payment_mismatches, reject
from orchestrator.providers.base import PaymentProvider, ProviderPayment
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

PAGE_SIZE = 100  # the provider's largest page: fewer round trips


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
    """The only times at which the provider can have created our provider payment, with a margin."""
    return LookupWindow(
        created_gte=int(first_create_at.timestamp() - margin_seconds),
        created_lte=int(last_create_at.timestamp() + call_seconds + margin_seconds) + 1,
    )


@dataclass
class LookupResult:
    verdict: Verdict
    provider_payment: ProviderPayment | None = None
    rejected: list[dict[str, Any]] = field(default_factory=list)


# Called before every page: renew the lease and store (cursor, pages read, rejected) on the
# record.  It raises to stop the scan (fenced out, time budget spent).
SaveProgress = Callable[[str | None, int, list[dict[str, Any]]], None]


def _merge(rejected: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in rejected if r.get("id") != entry["id"]] + [entry]


def scan_for_payment(
    provider: PaymentProvider,
    expected: ExpectedPayment,
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
        page = provider.list_payments(
            created_gte=window.created_gte,
            created_lte=window.created_lte,
            starting_after=cursor,
            limit=PAGE_SIZE,
        )
        pages_read += 1
        for provider_payment in page.provider_payments:
            if provider_payment.metadata.get(RECORD_ID_METADATA_KEY) != expected.record_id:
                continue
            problems = payment_mismatches(provider_payment, expected)
            if not problems:
                return LookupResult(Verdict.FOUND, provider_payment, rejected)
            rejected = _merge(rejected, reject(provider_payment, problems).to_json())
        if not page.has_more or not page.provider_payments:
            verdict = Verdict.FOREIGN_ONLY if rejected else Verdict.ABSENT
            return LookupResult(verdict, None, rejected)
        cursor = page.provider_payments[-1].id
    save(cursor, pages_read, rejected)
    return LookupResult(Verdict.UNFINISHED, None, rejected)
