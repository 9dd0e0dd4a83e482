"""Taking a lease away from its holder: the one function the sweeper and operators share.

``take_over_lease`` runs inside the caller's unit of work and decides from the row-locked
record::

    record                                        result                writes
    ------                                        ------                ------
    unknown id .................................  NOT_FOUND             nothing
    If-Match given and not the current lease tag  PRECONDITION_FAILED   nothing
    succeeded / failed / completed .............  FINISHED              nothing
    needs_attention ............................  NEEDS_ATTENTION       nothing (retry it)
    token differs from the one the caller saw ..  CHANGED_CONCURRENTLY  nothing
    lease live (locked_until > now), no force ..  LEASE_LIVE            nothing
    attempts >= MAX_ATTEMPTS ...................  PARKED                needs_attention, token+1
    deferred (no owner) and due ................  DUE_RETRY             token+1, dispatch lease
    anything else ..............................  TAKEN_OVER            token+1, dispatch lease

Bumping the token is the fence: the previous holder's every later write says
``WHERE lease_token = <old>`` and finds nothing.  The caller commits, and only then
publishes ``process_payment(id, new_token)`` (``requeue_after_commit``):

* publishing inside the transaction could hand a worker a token that is not committed yet
  (its claim fails and the payment waits a whole dispatch lease), or one that a rollback
  then erases;
* a failed publish costs latency, never money: the dispatch lease written here expires
  and the next sweep re-queues the record.

Operator actions (actor kind ``operator``) write their audit row here, in the same
transaction as the change they record, so there is never a takeover without its audit row
nor an audit row for a takeover that rolled back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orchestrator import metrics
from orchestrator.db.repositories.lease_repository_base import LeaseRepositoryBase
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.lease_state import NEEDS_ATTENTION
from orchestrator.domain.model import AuditEntry, PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.preconditions import TagList, lease_etag
from orchestrator.domain.states import RecoveryPoint
from orchestrator.engine.publisher import PublishFailed, TaskPublisher
from orchestrator.logging import get_logger

log = get_logger(__name__)

# Whatever holds a lease: a payment (its charge) or an operation (capture, cancel, refund).
LeasedRecord = PaymentRecord | OperationRecord


def leases_for(uow: UnitOfWork, record_id: str) -> LeaseRepositoryBase[Any]:
    """The rows holding ``record_id``'s lease: the payment row for a charge (``pay_…``), the
    operation row for anything else (``rfd_…``, ``cap_…``, ``cnl_…``)."""
    return uow.leases if is_payment_id(record_id) else uow.operations


def payment_of(record: LeasedRecord) -> str:
    return record.payment_id if isinstance(record, OperationRecord) else record.id


# audit_log.actor_client_id is VARCHAR(40).
MAX_ACTOR_ID_LENGTH = 40


class ActorKind(StrEnum):
    SWEEPER = "sweeper"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Actor:
    """Who takes a lease.  Operators are the ops API client or a named CLI user."""

    kind: ActorKind
    client_id: str
    name: str

    @classmethod
    def sweeper(cls, name: str) -> Actor:
        return cls(ActorKind.SWEEPER, "sweeper", name)

    @classmethod
    def operator(cls, client_id: str, name: str) -> Actor:
        if not client_id or len(client_id) > MAX_ACTOR_ID_LENGTH:
            raise ValueError(f"an operator id has 1-{MAX_ACTOR_ID_LENGTH} characters")
        return cls(ActorKind.OPERATOR, client_id, name)

    @property
    def lease_owner(self) -> str:
        """The owner written with the dispatch lease, until a worker claims it."""
        return f"dispatch:{self.kind.value}"


class TakeoverResult(StrEnum):
    TAKEN_OVER = "taken_over"
    DUE_RETRY = "due_retry"
    PARKED = "parked"
    NOT_FOUND = "not_found"
    PRECONDITION_FAILED = "precondition_failed"
    FINISHED = "finished"
    NEEDS_ATTENTION = "needs_attention"
    CHANGED_CONCURRENTLY = "changed_concurrently"
    LEASE_LIVE = "lease_live"


_REQUEUED = frozenset({TakeoverResult.TAKEN_OVER, TakeoverResult.DUE_RETRY})
_CHANGED = _REQUEUED | {TakeoverResult.PARKED}


@dataclass(frozen=True)
class TakeoverOutcome:
    result: TakeoverResult
    payment_id: str
    # After the change; as found for a refusal; None when the id is unknown.
    record: LeasedRecord | None
    old_token: int | None
    audit: AuditEntry | None = None

    @property
    def changed(self) -> bool:
        return self.result in _CHANGED

    @property
    def needs_requeue(self) -> bool:
        """A committed takeover that waits for its ``process_payment`` message."""
        return self.result in _REQUEUED

    @property
    def new_token(self) -> int | None:
        return self.record.lease_token if self.changed and self.record is not None else None


def lease_is_live(record: LeasedRecord, now: datetime) -> bool:
    # A processing record always carries locked_until; a NULL one is treated as live so
    # that only a forced takeover touches it (the SQL ``locked_until <= now`` agrees).
    return record.locked_until is None or record.locked_until > now


def take_over_lease(
    uow: UnitOfWork,
    payment_id: str,
    *,
    actor: Actor,
    reason: str,
    force: bool,
    now: datetime,
    lease_seconds: float,
    max_attempts: int,
    expected_token: int | None = None,
    if_match: TagList | None = None,
) -> TakeoverOutcome:
    """Fence out the holder of ``payment_id``'s lease (a payment's charge, or an operation:
    ``leases_for``), or park the record when it is out of attempts.  Runs in the caller's
    transaction; the caller commits, then calls ``requeue_after_commit``.  ``now`` must be
    ``uow.now()`` (the database clock).

    ``if_match`` (an operator's ``If-Match``) is compared with ``lease_etag`` of the
    row-locked record, so of two operators sending the same tag at once the second waits
    for the first's commit, then sees the new token and is refused."""
    leases = leases_for(uow, payment_id)
    record: LeasedRecord | None = leases.lock_for_takeover(payment_id)
    if record is None:
        return TakeoverOutcome(TakeoverResult.NOT_FOUND, payment_id, None, None)
    if if_match is not None and not if_match.matches_strongly(lease_etag(record)):
        # Evaluated before anything else (RFC 9110 §13.2.2): the operator decided on a
        # state that is gone, whatever the command would otherwise say.
        return TakeoverOutcome(
            TakeoverResult.PRECONDITION_FAILED, payment_id, record, record.lease_token
        )
    refusal = _refusal(record, now=now, force=force, expected_token=expected_token)
    if refusal is not None:
        return TakeoverOutcome(refusal, payment_id, record, record.lease_token)

    if record.attempts >= max_attempts:
        changed = leases.park_expired(
            payment_id,
            expected_token=record.lease_token,
            error=_parked_error(record, max_attempts),
            now=now,
        )
        result = TakeoverResult.PARKED
    else:
        changed = leases.take_over(
            payment_id,
            expected_token=record.lease_token,
            owner=actor.lease_owner,
            now=now,
            lease_until=now + timedelta(seconds=lease_seconds),
            require_expired=not force,
        )
        result = _requeue_kind(record, now)
    if changed is None:
        # The row is locked, so only a writer that ignores row locks (none should) gets
        # here; refuse rather than guess.
        return TakeoverOutcome(
            TakeoverResult.CHANGED_CONCURRENTLY, payment_id, record, record.lease_token
        )

    audit = None
    if actor.kind is ActorKind.OPERATOR:
        audit = uow.audit.add(
            actor_client_id=actor.client_id,
            actor_name=actor.name,
            action="park" if result is TakeoverResult.PARKED else "takeover",
            payment_id=payment_of(record),
            operation_id=None if record.id == payment_of(record) else record.id,
            reason=reason,
            old_token=record.lease_token,
            new_token=changed.lease_token,
            now=now,
        )
    return TakeoverOutcome(result, payment_id, changed, record.lease_token, audit)


def _refusal(
    record: LeasedRecord, *, now: datetime, force: bool, expected_token: int | None
) -> TakeoverResult | None:
    if record.status.is_final or record.recovery_point is RecoveryPoint.COMPLETED:
        # (A requires_capture payment's charge is completed too: its capture or cancel is
        # an operation of its own, taken over by that operation's id.)
        return TakeoverResult.FINISHED
    if record.status == NEEDS_ATTENTION:
        return TakeoverResult.NEEDS_ATTENTION
    if expected_token is not None and record.lease_token != expected_token:
        return TakeoverResult.CHANGED_CONCURRENTLY
    if lease_is_live(record, now) and not force:
        return TakeoverResult.LEASE_LIVE
    return None


def _requeue_kind(record: LeasedRecord, now: datetime) -> TakeoverResult:
    """A deferred record (a worker released it until ``next_attempt_at``) that is due is a
    scheduled retry, not a rescue from a lost holder."""
    deferred = record.lease_owner is None and record.next_attempt_at is not None
    if deferred and not lease_is_live(record, now):
        return TakeoverResult.DUE_RETRY
    return TakeoverResult.TAKEN_OVER


def _parked_error(record: LeasedRecord, max_attempts: int) -> str:
    # park_expired overwrites last_error: keep the worker's last error inside the new one,
    # it is what the operator needs to decide.
    return (
        f"parked after {record.attempts} attempts (PAYORCH_MAX_ATTEMPTS={max_attempts}); "
        f"last error: {record.last_error or 'none recorded'}"
    )


def count_outcome(outcome: TakeoverOutcome, actor: Actor) -> None:
    """Metrics for a committed outcome (never for a rolled-back one)."""
    if outcome.result is TakeoverResult.TAKEN_OVER:
        metrics.LEASE_TAKEOVERS.labels(by=actor.kind.value).inc()
    elif outcome.result is TakeoverResult.PARKED:
        metrics.PAYMENTS_PARKED.inc()


def requeue_after_commit(publisher: TaskPublisher, payment_id: str, lease_token: int) -> bool:
    """Publish the wake-up for committed work.  False when the broker refused it: that is
    counted and logged, and the record's dispatch lease expires back to the sweeper."""
    try:
        if is_payment_id(payment_id):
            publisher.publish_process_payment(payment_id, lease_token)
        else:
            publisher.publish_operation(payment_id, lease_token)
    except PublishFailed as error:
        metrics.PUBLISH_FAILURES.inc()
        log.warning(
            "requeue_publish_failed",
            payment_id=payment_id,
            lease_token=lease_token,
            error=str(error),
        )
        return False
    return True
