"""An operator asks payorch to read a payment's refunds at the provider again: the way to
reconcile a refund made outside payorch whose event was lost (``services.refund_sync``).

One transaction: the sync is queued (due now; or the one already queued and not yet claimed
is reused) with its audit row.  No provider call and no publish: the sweeper dispatches it.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.model import AuditEntry
from orchestrator.domain.operations import OperationRecord
from orchestrator.engine.takeover import Actor, ActorKind
from orchestrator.logging import get_logger
from orchestrator.ops.errors import PaymentNotFound, clean_reason
from orchestrator.services.refund_sync import request_refund_sync

log = get_logger(__name__)

ACTION = "sync_refunds"


@dataclass(frozen=True)
class QueuedSync:
    sync: OperationRecord
    created: bool  # False: a sync already queued (not yet claimed) covers this request
    audit: AuditEntry


def sync_payment_refunds(
    uow: UnitOfWorkFactory, operator: Actor, payment_id: str, *, reason: str
) -> QueuedSync:
    if operator.kind is not ActorKind.OPERATOR:
        raise ValueError("operator commands need an operator actor")
    reason = clean_reason(reason)
    with uow() as unit:
        now = unit.now()
        if unit.payments.get(payment_id) is None:
            raise PaymentNotFound(f"No payment {payment_id!r} exists.")
        sync, created = request_refund_sync(
            unit, payment_id, reason=f"operator {operator.name}: {reason}", now=now
        )
        audit = unit.audit.add(
            actor_client_id=operator.client_id,
            actor_name=operator.name,
            action=ACTION,
            payment_id=payment_id,
            operation_id=sync.id,
            reason=reason,
            old_token=None,
            new_token=None,
            now=now,
        )
        unit.commit()
    log.warning(
        "operator_sync_refunds",
        payment_id=payment_id,
        operation_id=sync.id,
        operator=operator.name,
        created=created,
    )
    return QueuedSync(sync, created, audit)
