"""Retrying parked payments in bulk (decision 0088): ``payorch payments retry --status
needs_attention [--since T] [--connector ca_…] --reason …`` and
``POST /v1/ops/payments/retry``.

Read top to bottom:

1. ``bulk_retry_filter`` checks what the operator asked for: the status (only
   ``needs_attention``: nothing else is retried), ``since`` (parked at or after; a time
   with its zone), the connector account (one that exists, or ``ca_platform_stripe``).
2. ``run_bulk_retry`` walks the matching payments oldest first, one page of
   ``BATCH_SIZE`` per short read, and hands each to ``ops.commands.retry_payment``: the
   single retry itself, with its own transaction (row lock, fenced compare-and-set, audit
   row) and its publish after its commit.  Nothing here writes a row or picks a key: the
   money takes the same path as one operator's ``payorch payments retry pay_…``.
3. Each payment is retried under the lease tag it was listed with (``If-Match``), so a
   payment that changed between the read and its retry (another operator retried it, it
   settled, it parked again) is skipped and says why, never acted on unseen.

Hazards, and what guards each:

* **One giant transaction** would hold thousands of row locks while it publishes, and a
  failure at the end would undo every retry before it: each retry commits alone, each page
  read is its own short transaction.
* **A transaction across a broker publish**: ``retry_payment`` publishes after its commit;
  a refused publish leaves the dispatch lease to expire back to the sweeper (counted as
  ``not_published``).
* **Retried twice by one run**: a retried payment may park again at once (the provider is
  still down).  The walk is a keyset on (created_at, id) that only moves forward, so a run
  never comes back to a payment it passed.
* **Interrupted** (Ctrl-C, a lost connection, an API ``limit``): every retry already
  committed is whole (its audit row with it), and it left ``needs_attention``; a second run
  lists only what is still parked, so it retries exactly what the first did not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY, circuit_key
from orchestrator.domain.connector_accounts import is_connector_account_id
from orchestrator.domain.instants import OUT_OF_RANGE, in_utc
from orchestrator.domain.lease_state import NEEDS_ATTENTION
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.preconditions import EntityTag, TagList, lease_etag
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.engine.takeover import Actor
from orchestrator.logging import get_logger
from orchestrator.ops.commands import OperatorAction, retry_payment
from orchestrator.ops.errors import (
    InvalidFilter,
    OpsConflict,
    PaymentNotFound,
    PreconditionFailed,
    UnknownConnectorAccount,
    clean_reason,
)
from orchestrator.settings import Settings

log = get_logger(__name__)

# Payments read per page.  Each page is one short read; each retry its own transaction, so
# this bounds memory and the read's cost, never a lock's lifetime.
BATCH_SIZE = 100

# What a bulk retry accepts for --status.  Only a parked payment is retried; the others
# are refused with what to do instead (``bulk_retry_filter``).
RETRIED_STATUSES: tuple[str, ...] = (NEEDS_ATTENTION,)
_NOT_RETRIED = {
    "processing": "a processing payment is being worked on or waits (a circuit, a backoff, "
    "its customer) and resumes by itself; a stuck lease is taken over "
    "(payorch leases takeover)",
    "requires_action": "a payment in requires_action waits for its customer",
    "requires_capture": "a payment in requires_capture is authorised and waits for its "
    "capture or cancel",
    "succeeded": "a succeeded payment is finished",
    "failed": "a failed payment is finished (a new attempt is a new payment)",
    "canceled": "a canceled payment is finished",
}


class BulkResult(StrEnum):
    RETRIED = "retried"
    WOULD_RETRY = "would_retry"  # a dry run
    SKIPPED = "skipped"


class SkipReason(StrEnum):
    """Why a listed payment was not retried (nothing was written for it)."""

    NOT_PARKED = "not_parked"  # someone retried it (or took it over) since it was listed
    FINISHED = "finished"  # it succeeded or failed since (a provider event, a late worker)
    CHANGED = "changed"  # still parked, but its lease changed since (retried, parked again)


@dataclass(frozen=True)
class BulkRetryFilter:
    status: str
    since: datetime | None = None
    connector: str | None = None  # a ca_… id, or PLATFORM_CIRCUIT_KEY


@dataclass(frozen=True)
class BulkRetryItem:
    """One payment the run visited, as it was listed."""

    payment_id: str
    connector: str
    parked_at: datetime
    last_error: str | None
    lease_token: int
    result: BulkResult
    skip_reason: SkipReason | None = None
    action: OperatorAction | None = None


@dataclass
class BulkRetrySummary:
    filters: BulkRetryFilter
    dry_run: bool
    items: list[BulkRetryItem] = field(default_factory=list)
    # True when the run stopped at its limit and more matching payments are parked.
    more: bool = False

    @property
    def matched(self) -> int:
        return len(self.items)

    @property
    def retried(self) -> int:
        return sum(1 for i in self.items if i.result is BulkResult.RETRIED)

    @property
    def would_retry(self) -> int:
        return sum(1 for i in self.items if i.result is BulkResult.WOULD_RETRY)

    @property
    def skipped(self) -> dict[str, int]:
        counts = {reason.value: 0 for reason in SkipReason}
        for item in self.items:
            if item.skip_reason is not None:
                counts[item.skip_reason.value] += 1
        return counts

    @property
    def not_published(self) -> int:
        """Retried, but the broker refused the wake-up: the sweeper re-queues them when
        their dispatch lease expires."""
        return sum(1 for i in self.items if i.action is not None and i.action.published is False)


def parse_since(text: str) -> datetime:
    """ISO 8601 with a zone (``2026-12-05T14:00:00Z``).  A time without one is refused,
    not guessed: read as UTC on a host set to another zone it would retry hours too many
    or too few."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidFilter(
            f"since: {text!r} is not an ISO 8601 time; give one with its zone, such as "
            "2026-12-05T14:00:00Z."
        ) from None
    if value.tzinfo is None:
        raise InvalidFilter(
            f"since: {text!r} has no time zone; add one, such as 2026-12-05T14:00:00Z."
        )
    if in_utc(value) is None:
        raise InvalidFilter(f"since: {text!r} is out of range: {OUT_OF_RANGE}.")
    return value


def bulk_retry_filter(
    uow: UnitOfWorkFactory,
    *,
    status: str,
    since: datetime | None = None,
    connector: str | None = None,
) -> BulkRetryFilter:
    """The filter, checked; ``InvalidFilter`` or ``UnknownConnectorAccount`` otherwise."""
    if status not in RETRIED_STATUSES:
        why = _NOT_RETRIED.get(status, f"{status!r} is not a payment status")
        raise InvalidFilter(f"status: only needs_attention payments are retried in bulk; {why}.")
    if since is not None and since.tzinfo is None:
        raise InvalidFilter("since: give a time with its zone, such as 2026-12-05T14:00:00Z.")
    if connector is not None and connector != PLATFORM_CIRCUIT_KEY:
        if not is_connector_account_id(connector):
            raise InvalidFilter(
                f"connector: {connector!r} is not a connector account id (ca_ and 24 hex "
                f"digits, or {PLATFORM_CIRCUIT_KEY} for the platform's own account)."
            )
        with uow() as unit:
            account = unit.connector_accounts.get(connector)
        if account is None:
            raise UnknownConnectorAccount(f"No connector account {connector!r} exists.")
    return BulkRetryFilter(status=status, since=since, connector=connector)


def run_bulk_retry(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    filters: BulkRetryFilter,
    *,
    reason: str,
    dry_run: bool = False,
    limit: int | None = None,
    on_item: Callable[[BulkRetryItem], None] | None = None,
) -> BulkRetrySummary:
    """Retry (or, with ``dry_run``, list) the parked payments ``filters`` match, at most
    ``limit`` of them (None: all).  ``on_item`` sees each as it is done, so a caller that
    is interrupted still knows what was."""
    reason = clean_reason(reason)  # refused before anything is read or written
    summary = BulkRetrySummary(filters=filters, dry_run=dry_run)
    after: tuple[datetime, str] | None = None
    while True:
        remaining = None if limit is None else limit - summary.matched
        if remaining is not None and remaining <= 0:
            summary.more = bool(_page(uow, filters, after, 1))
            break
        page = _page(uow, filters, after, min(BATCH_SIZE, remaining or BATCH_SIZE))
        if not page:
            break
        for record in page:
            if dry_run:
                item = _listed(record, BulkResult.WOULD_RETRY)
            else:
                item = _retry(uow, publisher, settings, operator, record, reason)
            summary.items.append(item)
            if on_item is not None:
                on_item(item)
        last = page[-1]
        after = (last.created_at, last.id)
    log.warning(
        "operator_bulk_retry",
        operator_id=operator.client_id,
        operator=operator.name,
        dry_run=dry_run,
        since=None if filters.since is None else filters.since.isoformat(),
        connector=filters.connector,
        matched=summary.matched,
        retried=summary.retried,
        skipped=summary.skipped,
        not_published=summary.not_published,
        more=summary.more,
    )
    return summary


def _page(
    uow: UnitOfWorkFactory,
    filters: BulkRetryFilter,
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[PaymentRecord]:
    with uow() as unit:
        return unit.search.parked(
            since=filters.since, connector=filters.connector, after=after, limit=limit
        )


def _listed(record: PaymentRecord, result: BulkResult) -> BulkRetryItem:
    return BulkRetryItem(
        payment_id=record.id,
        connector=circuit_key(record.connector_account_id),
        parked_at=record.updated_at,
        last_error=record.last_error,
        lease_token=record.lease_token,
        result=result,
    )


def _retry(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    record: PaymentRecord,
    reason: str,
) -> BulkRetryItem:
    listed = _listed(record, BulkResult.RETRIED)
    # The lease tag as listed: the filters were judged on this state of the row.
    seen = TagList(any=False, tags=(EntityTag(lease_etag(record).strip('"')),))
    try:
        action = retry_payment(
            uow, publisher, settings, operator, record.id, reason=reason, if_match=seen
        )
    except (PreconditionFailed, OpsConflict, PaymentNotFound) as error:
        # Refused before anything was written: the payment as it is now says why.
        return replace(listed, result=BulkResult.SKIPPED, skip_reason=_skip_reason(error.record))
    return replace(listed, action=action)


def _skip_reason(now: PaymentRecord | OperationRecord | None) -> SkipReason:
    if now is None or now.status.value == NEEDS_ATTENTION:
        return SkipReason.CHANGED
    if now.status.is_final:
        return SkipReason.FINISHED
    return SkipReason.NOT_PARKED
