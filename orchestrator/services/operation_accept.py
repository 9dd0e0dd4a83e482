"""What every merchant-keyed operation's accept shares (refunds, captures, cancels): the
``Idempotency-Key`` protocol around the kind's own insert, and the row it inserts.

    claim the key (``claim_key``: the kind's insert in one transaction, under the payment's
    row lock; ``INSERT … ON CONFLICT DO NOTHING`` on (client, kind, key))
      ├── inserted → count it, log it, wake a worker: with ``WAKE_UP=notify`` the insert's
      │              statement sends the NOTIFY the dispatcher publishes from (as for
      │              payments, ``services.accept``), else publish after the commit.  A lost
      │              wake-up (no listener, a failed publish) still answers 202: the dispatch
      │              lease expires into the sweeper's hands
      └── taken    → the same request is a replay of the operation that holds the key;
                     another request under it is ``IdempotencyKeyReused`` (422)

The kind's insert decides what it admits and raises its refusals inside the transaction, so
a refused request stores nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationKindName, OperationRecord, OperationStatus
from orchestrator.domain.states import RecoveryPoint
from orchestrator.engine.publisher import PublishFailed, TaskPublisher
from orchestrator.logging import get_logger, key_digest
from orchestrator.services.idempotency import claim_key, require_same_request
from orchestrator.settings import Settings

log = get_logger(__name__)

DISPATCH_OWNER = "dispatch"
INITIAL_LEASE_TOKEN = 1

# The kind's insert, in the claim's transaction: the new operation, or None when the key is
# taken (the operation holding it answers).  Its last argument is ``wake``: the insert sends
# the wake-up NOTIFY in its statement (``OperationRepository.insert_if_absent``).
Insert = Callable[[UnitOfWork, datetime, bool], OperationRecord | None]


@dataclass(frozen=True)
class Claimed:
    record: OperationRecord
    replayed: bool


def accept_operation(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    *,
    client_id: str,
    kind: OperationKindName,
    idempotency_key: str,
    fingerprint: str,
    insert: Insert,
) -> Claimed:
    """Raises what ``insert`` raises (nothing stored) or IdempotencyKeyReused."""
    key_tag = key_digest(settings.secret_key.get_secret_value(), idempotency_key)
    # notify (PostgreSQL's default): the insert's statement wakes the dispatcher, which
    # publishes; publish: the API publishes after its commit (SQLite always does).
    notify = settings.wake_up_mode == "notify"
    claimed = claim_key(
        uow,
        insert=lambda unit, now: insert(unit, now, notify),
        find=lambda unit: unit.operations.find_by_key(client_id, kind, idempotency_key),
    )
    record = claimed.record
    if not claimed.created:
        require_same_request(
            record, record.request_fingerprint, fingerprint, client_id=client_id, key_tag=key_tag
        )
        return Claimed(record, replayed=True)

    metrics.OPERATIONS_ACCEPTED.labels(kind=kind.value).inc()
    log.info(
        f"{kind.value}_accepted",
        operation_id=record.id,
        payment_id=record.payment_id,
        amount=record.amount,
        client_id=client_id,
        key_hmac=key_tag,
    )
    if notify:
        return Claimed(record, replayed=False)
    try:
        publisher.publish_operation(record.id, record.lease_token)
    except PublishFailed as error:
        metrics.PUBLISH_FAILURES.inc()
        log.warning("task_publish_failed", operation_id=record.id, error=str(error))
    return Claimed(record, replayed=False)


def new_operation_values(
    operation_id: str,
    kind: OperationKindName,
    payment: PaymentRecord,
    *,
    idempotency_key: str | None,
    fingerprint: str | None,
    amount: int | None,
    reason: str | None,
    metadata: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A new operation row of ``payment``'s client, processing, at ``accepted``, its lease
    the dispatcher's (``dispatch_lease`` sets until when)."""
    return {
        "id": operation_id,
        "kind": kind.value,
        "payment_id": payment.id,
        "client_id": payment.client_id,
        "idempotency_key": idempotency_key,
        "request_fingerprint": fingerprint,
        "status": OperationStatus.PROCESSING.value,
        "recovery_point": RecoveryPoint.ACCEPTED.value,
        "lease_token": INITIAL_LEASE_TOKEN,
        "lease_owner": DISPATCH_OWNER,
        "next_attempt_at": None,
        "attempts": 0,
        "unknown_outcomes": 0,
        "step_attempts": 0,
        "lookup_pending": False,
        "amount": amount,
        "currency": payment.request.currency,
        "reason": reason,
        "metadata": dict(metadata or {}),
        "origin": "payorch",
    }


def dispatch_lease(settings: Settings, now: datetime) -> dict[str, Any]:
    """The accepted row's times: the dispatch lease (a lost publish ends at the sweeper
    when it expires), created and updated now."""
    return {
        "locked_until": now + timedelta(seconds=settings.dispatch_lease_seconds),
        "created_at": now,
        "updated_at": now,
    }
