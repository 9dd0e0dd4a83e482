"""Disputes reported by the provider (``charge.dispute.*`` events): recorded once per
dispute, shown to ops, and announced to the merchant as ``payment.disputed``.

The hazard, and why this is the one event whose object is recorded as sent: the provider
protocol has no dispute read (payorch never acts on a dispute: no money state of the
payment, no ledger line, no operation derives from it), so there is nothing to retrieve
and apply through a fenced path.  What keeps it honest: the event's signature was
verified, each event id is stored once (a replay never gets here), and a late, older event
never overwrites a newer status (``last_event_created``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.db.repositories.disputes import DisputeRecord
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.encoding import iso
from orchestrator.logging import get_logger
from orchestrator.providers.base import ProviderEvent

log = get_logger(__name__)


def dispute_representation(dispute: DisputeRecord) -> dict[str, Any]:
    return {
        "id": dispute.id,
        "object": "dispute",
        "payment_id": dispute.payment_id,
        "provider_payment_id": dispute.provider_payment_id,
        "amount": dispute.amount,
        "currency": dispute.currency,
        "reason": dispute.reason,
        "status": dispute.status,
        "created_at": iso(dispute.created_at),
        "updated_at": iso(dispute.updated_at),
    }


def record_dispute_event(
    uow: UnitOfWork, event: ProviderEvent, payment_id: str, *, now: datetime
) -> DisputeRecord | None:
    """In the event's own transaction: the dispute row, and ``payment.disputed`` the first
    time this dispute is seen.  None when the event is not about a dispute."""
    facts = event.dispute
    if facts is None:
        return None
    dispute, created = uow.disputes.record(
        dispute_id=event.object_id,
        payment_id=payment_id,
        provider_payment_id=event.provider_payment_id,
        amount=facts.amount,
        currency=facts.currency,
        reason=facts.reason,
        status=facts.status,
        event_created=event.created,
        now=now,
    )
    if created:
        uow.outcomes.add_outbox_event(
            payment_id, "payment.disputed", dispute_representation(dispute), now=now
        )
        log.warning(
            "payment_disputed",
            payment_id=payment_id,
            dispute_id=dispute.id,
            amount=dispute.amount,
            reason=dispute.reason,
        )
    return dispute
