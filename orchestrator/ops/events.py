"""What operators do with events: read an event's deliveries, redeliver it (audited).

The ops API and the console both call these (one implementation).  An operator command,
so it lives with the others in ``ops`` (the audit trail, ``clean_reason``, the ``Actor``),
above the webhook relay it acts on."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.repositories.deliveries import DeliveryView
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.ids import is_event_id
from orchestrator.domain.model import AuditEntry
from orchestrator.domain.webhooks import Event, WebhookEndpoint, WebhookStats
from orchestrator.engine.takeover import Actor
from orchestrator.events.event_reads import shown_now
from orchestrator.ops.errors import clean_reason

REDELIVER_ACTION = "redeliver"


class EventNotFound(LookupError):
    pass


@dataclass(frozen=True)
class EventDeliveries:
    event: Event
    deliveries: list[DeliveryView]


@dataclass(frozen=True)
class Redelivery:
    event: Event
    requeued: int
    audit: AuditEntry


def list_all_endpoints(uow: UnitOfWorkFactory) -> tuple[list[WebhookEndpoint], WebhookStats]:
    """Every live endpoint of every merchant (disabled first), and the relay's backlog."""
    with uow() as unit:
        return unit.webhook_endpoints.list_all(), unit.deliveries.stats()


def event_deliveries(uow: UnitOfWorkFactory, public_id: str) -> EventDeliveries:
    if not is_event_id(public_id):
        raise EventNotFound(public_id)
    with uow() as unit:
        event = unit.events.get(public_id)
        if event is None:
            raise EventNotFound(public_id)
        [shown] = shown_now(unit.payments, [event])
        return EventDeliveries(shown, unit.deliveries.for_event(event.id))


def redeliver_event(
    uow: UnitOfWorkFactory, actor: Actor, public_id: str, *, reason: str
) -> Redelivery:
    """Every delivery of the event to an enabled endpoint becomes due now with a new retry
    window (a delivered one is sent again: receivers dedupe by webhook-id), in the same
    transaction as its audit row.  Raises ``InvalidReason`` without a reason."""
    why = clean_reason(reason)
    if not is_event_id(public_id):
        raise EventNotFound(public_id)
    with uow() as unit:
        event = unit.events.get(public_id)
        if event is None:
            raise EventNotFound(public_id)
        now = unit.now()
        requeued = unit.deliveries.redeliver_event(
            event.id, event.client_id, event.event_type, now=now
        )
        audit = unit.audit.add(
            actor_client_id=actor.client_id,
            actor_name=actor.name,
            action=REDELIVER_ACTION,
            payment_id=event.payment_id,
            reason=f"{event.public_id}: {why}"[:1000],
            old_token=None,
            new_token=None,
            now=now,
        )
        unit.commit()
    return Redelivery(event=event, requeued=requeued, audit=audit)
