"""What an operator may do: take over a lease, retry a needs_attention payment.

Each command is one transaction that changes the record and writes its audit row (who,
when, why, old token, new token) together, then, after the commit, publishes the
``process_payment`` wake-up with the new token.  A failed publish does not undo the
command: the record holds a dispatch lease that expires back to the sweeper.

Each command takes what it uses: the unit of work, the publisher of the wake-up, and the
settings (the dispatch lease, the attempt budget).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.lease_state import NEEDS_ATTENTION
from orchestrator.domain.model import AuditEntry
from orchestrator.domain.preconditions import TagList, lease_etag
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.engine.takeover import (
    Actor,
    ActorKind,
    LeasedRecord,
    TakeoverOutcome,
    TakeoverResult,
    count_outcome,
    leases_for,
    payment_of,
    requeue_after_commit,
    take_over_lease,
)
from orchestrator.logging import get_logger
from orchestrator.ops.errors import (
    ConcurrentChange,
    LeaseStillLive,
    OpsError,
    PaymentFinished,
    PaymentNeedsAttention,
    PaymentNotFound,
    PaymentNotParked,
    PreconditionFailed,
    clean_reason,
)
from orchestrator.settings import Settings

log = get_logger(__name__)


@dataclass(frozen=True)
class OperatorAction:
    """A committed operator command."""

    action: str  # "takeover", "park" (out of attempts) or "retry"; as in the audit row
    payment_id: str
    record: LeasedRecord
    audit: AuditEntry
    old_token: int
    new_token: int
    # None when nothing was to be published (a parked payment waits for a retry).
    published: bool | None
    now: datetime


def take_over_payment(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    payment_id: str,
    *,
    reason: str,
    force: bool,
    if_match: TagList | None = None,
) -> OperatorAction:
    """Fence out the lease holder and re-queue the work; a live lease needs ``force``.  A
    payment out of attempts is parked instead (action ``park``): retry it to reset them.
    With ``if_match`` (the lease tag the operator saw) a changed lease refuses the command
    (``PreconditionFailed``) and nothing is written."""
    _require_operator(operator)
    reason = clean_reason(reason)
    with uow() as unit:
        now = unit.now()
        outcome = take_over_lease(
            unit,
            payment_id,
            actor=operator,
            reason=reason,
            force=force,
            now=now,
            lease_seconds=settings.dispatch_lease_seconds,
            max_attempts=settings.max_attempts,
            if_match=if_match,
        )
        if not outcome.changed:
            raise _refusal(outcome)
        unit.commit()
    count_outcome(outcome, operator)
    assert outcome.record is not None
    assert outcome.audit is not None
    assert outcome.old_token is not None
    assert outcome.new_token is not None
    published = None
    if outcome.needs_requeue:
        published = requeue_after_commit(publisher, payment_id, outcome.new_token)
    log.warning(
        "operator_takeover",
        payment_id=payment_id,
        result=outcome.result.value,
        operator_id=operator.client_id,
        operator=operator.name,
        old_token=outcome.old_token,
        new_token=outcome.new_token,
        forced=force,
        published=published,
    )
    return OperatorAction(
        action=outcome.audit.action,
        payment_id=payment_id,
        record=outcome.record,
        audit=outcome.audit,
        old_token=outcome.old_token,
        new_token=outcome.new_token,
        published=published,
        now=now,
    )


def retry_payment(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    operator: Actor,
    payment_id: str,
    *,
    reason: str,
    if_match: TagList | None = None,
) -> OperatorAction:
    """needs_attention -> processing with fresh attempt counters, from the recovery point
    where the work stopped, and re-queue it.  ``if_match`` as for ``take_over_payment``,
    checked against the row-locked record."""
    _require_operator(operator)
    reason = clean_reason(reason)
    with uow() as unit:
        now = unit.now()
        leases = leases_for(unit, payment_id)
        record: LeasedRecord | None = leases.lock_for_takeover(payment_id)
        if record is None:
            raise PaymentNotFound(f"No payment {payment_id!r} exists.")
        if if_match is not None and not if_match.matches_strongly(lease_etag(record)):
            raise PreconditionFailed(_stale_message(record), record)
        if record.status.is_final:
            raise PaymentFinished(_finished_message(record), record)
        if record.status != NEEDS_ATTENTION:
            raise PaymentNotParked(
                f"Payment {payment_id} is {record.status.value}, not needs_attention; only a "
                "parked payment is retried. A stuck lease is taken over instead.",
                record,
            )
        retried = leases.retry_parked(
            payment_id,
            expected_token=record.lease_token,
            owner=operator.lease_owner,
            now=now,
            lease_until=now + timedelta(seconds=settings.dispatch_lease_seconds),
        )
        if retried is None:
            raise ConcurrentChange(_changed_message(payment_id), record)
        audit = unit.audit.add(
            actor_client_id=operator.client_id,
            actor_name=operator.name,
            action="retry",
            payment_id=payment_of(record),
            operation_id=None if record.id == payment_of(record) else record.id,
            reason=reason,
            old_token=record.lease_token,
            new_token=retried.lease_token,
            now=now,
        )
        unit.commit()
    published = requeue_after_commit(publisher, payment_id, retried.lease_token)
    log.warning(
        "operator_retry",
        payment_id=payment_id,
        operator_id=operator.client_id,
        operator=operator.name,
        old_token=record.lease_token,
        new_token=retried.lease_token,
        recovery_point=retried.recovery_point.value,
        published=published,
    )
    return OperatorAction(
        action="retry",
        payment_id=payment_id,
        record=retried,
        audit=audit,
        old_token=record.lease_token,
        new_token=retried.lease_token,
        published=published,
        now=now,
    )


def _require_operator(actor: Actor) -> None:
    # Operator commands are audited under a person or an ops client, never the sweeper.
    if actor.kind is not ActorKind.OPERATOR:
        raise ValueError("operator commands need an operator actor")


def _finished_message(record: LeasedRecord) -> str:
    return f"Payment {record.id} already {record.status.value}; there is nothing to take over."


def _refusal(outcome: TakeoverOutcome) -> OpsError:
    record = outcome.record
    payment_id = outcome.payment_id
    if outcome.result is TakeoverResult.NOT_FOUND or record is None:
        return PaymentNotFound(f"No payment {payment_id!r} exists.")
    if outcome.result is TakeoverResult.PRECONDITION_FAILED:
        return PreconditionFailed(_stale_message(record), record)
    if outcome.result is TakeoverResult.FINISHED:
        return PaymentFinished(_finished_message(record), record)
    if outcome.result is TakeoverResult.NEEDS_ATTENTION:
        return PaymentNeedsAttention(
            f"Payment {payment_id} needs attention and holds no lease; retry it instead.",
            record,
        )
    if outcome.result is TakeoverResult.LEASE_LIVE:
        until = record.locked_until.isoformat() if record.locked_until else "unknown"
        return LeaseStillLive(
            f"Payment {payment_id}'s lease (owner {record.lease_owner or 'none'}) is live "
            f"until {until}. Taking over a live lease fences out a worker that may be "
            "mid-call; repeat with force if you are sure it is stuck.",
            record,
        )
    return ConcurrentChange(_changed_message(payment_id), record)


def _stale_message(record: LeasedRecord) -> str:
    return (
        f"Payment {record.id}'s lease changed since you looked (If-Match): someone else "
        "acted on it. Nothing was done; look at it again before acting."
    )


def _changed_message(payment_id: str) -> str:
    return f"Payment {payment_id} changed while we looked at it; list it again and retry."
