"""Queueing a refund sync (``engine.kinds.refund_sync``): the one way payorch learns of a
refund made at the provider outside payorch (the provider's dashboard).

Two callers: a provider event about the payment's refunds (``services.provider_events``,
in the event's own transaction), and an operator (``payorch payments sync-refunds``,
``POST /v1/ops/payments/{id}/sync_refunds``) when an event may have been lost.  No provider
call here: the sync row is written due now, with nobody holding it, and the sweeper's next
pass dispatches it like any due operation.

A sync that no worker has claimed yet will list the provider's refunds after this moment,
so it covers this hint too: a burst of events (the provider sends ``charge.refunded`` and
``refund.created`` for one refund) queues one sync, not one each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.operations import (
    ORIGIN_PROVIDER,
    OperationKindName,
    OperationRecord,
    OperationStatus,
    new_operation_id,
)
from orchestrator.domain.states import RecoveryPoint
from orchestrator.logging import get_logger

log = get_logger(__name__)

# The provider's events that may mean a refund payorch did not make.  On the pinned API
# version (after 2024-10-28.acacia) the provider sends
# refund.created / .updated / .failed for every refund, besides the charge's
# charge.refunded and the older charge.refund.updated.  Each is only a hint to read the
# refunds; all are taken, so a version move either way loses none.
REFUND_EVENT_TYPES = frozenset(
    {
        "charge.refunded",
        "charge.refund.updated",
        "refund.created",
        "refund.updated",
        "refund.failed",
    }
)


def request_refund_sync(
    uow: UnitOfWork, payment_id: str, *, reason: str, now: datetime
) -> tuple[OperationRecord, bool]:
    """The sync that will read ``payment_id``'s refunds: a new one due now, or the one
    already queued and not yet claimed.  (record, created).  The caller commits."""
    queued = uow.operations.unclaimed_sync(payment_id)
    if queued is not None:
        return queued, False
    payment = uow.payments.get(payment_id)
    if payment is None:
        raise LookupError(payment_id)
    values: dict[str, Any] = {
        "id": new_operation_id(OperationKindName.REFUND_SYNC),
        "kind": OperationKindName.REFUND_SYNC.value,
        "payment_id": payment.id,
        "client_id": payment.client_id,
        "idempotency_key": None,
        "request_fingerprint": None,
        "status": OperationStatus.PROCESSING.value,
        "recovery_point": RecoveryPoint.ACCEPTED.value,
        "lease_token": 1,
        # Due now, nobody holding it: the sweeper dispatches it (no broker call here).
        "lease_owner": None,
        "locked_until": now,
        "next_attempt_at": now,
        "attempts": 0,
        "unknown_outcomes": 0,
        "step_attempts": 0,
        "lookup_pending": False,
        "amount": None,
        "currency": payment.request.currency,
        "reason": reason[:100],
        "metadata": {},
        "origin": ORIGIN_PROVIDER,
        "created_at": now,
        "updated_at": now,
    }
    record = uow.operations.insert(values)
    log.info("refund_sync_queued", operation_id=record.id, payment_id=payment_id, reason=reason)
    return record, True
