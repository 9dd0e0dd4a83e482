"""Reading events: a merchant's list (``GET /v1/events``) and one event.

Every event read for showing or sending passes ``shown_now``: a client secret in its
payload is shown only while the payment still waits for its customer with it, the
merchant's idempotency key only while the payment still holds it
(``domain.event_visibility``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.event_types import EVENT_TYPES, is_known_event_type
from orchestrator.domain.event_visibility import has_short_lived_values, visible_payload
from orchestrator.domain.ids import is_event_id
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.webhooks import Event

DEFAULT_EVENT_LIMIT = 25
MAX_EVENT_LIMIT = 100


class InvalidEventQuery(ValueError):
    pass


class _Payments(Protocol):
    def get(self, payment_id: str) -> PaymentRecord | None: ...


class _PaymentEvent(Protocol):
    @property
    def payment_id(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


E = TypeVar("E", bound=_PaymentEvent)


def shown_now(payments: _Payments, events: list[E], *, keys: bool = True) -> list[E]:
    """``events`` as they may be shown or sent now: a client secret only while its wait
    lasts, an idempotency key (unless ``keys`` is false) only until it is purged.  Reads
    the payment of each event that carries such a value, once per payment: at most one
    primary-key read per event of the page."""
    current: dict[str, PaymentRecord | None] = {}
    shown = []
    for event in events:
        if has_short_lived_values(event.payload, keys=keys):
            if event.payment_id not in current:
                current[event.payment_id] = payments.get(event.payment_id)
            payload = visible_payload(event.payload, current[event.payment_id])
            if payload is not event.payload:
                event = replace(event, payload=payload)  # type: ignore[type-var]
        shown.append(event)
    return shown


@dataclass(frozen=True)
class EventPage:
    events: list[Event]
    has_more: bool


def list_events(
    uow: UnitOfWorkFactory,
    client_id: str,
    *,
    after: str | None,
    event_type: str | None,
    limit: int,
) -> EventPage:
    """Oldest first, after the event ``after`` (an ``evt_…`` id of this client)."""
    if event_type is not None and not is_known_event_type(event_type):
        raise InvalidEventQuery(
            f"Unknown event type {event_type!r}; known: {', '.join(EVENT_TYPES)}."
        )
    with uow() as unit:
        after_id = None
        if after is not None:
            anchor = unit.events.get(after, client_id=client_id) if is_event_id(after) else None
            if anchor is None:
                raise InvalidEventQuery(
                    f"'after' must be the id of one of your events (evt_…); {after[:60]!r} is "
                    "not (events are kept for PAYORCH_WEBHOOK_EVENT_RETENTION_DAYS)."
                )
            after_id = anchor.id
        events = unit.events.list_for_client(
            client_id, after_id=after_id, event_type=event_type, limit=limit + 1
        )
        events = shown_now(unit.payments, events)
    return EventPage(events=events[:limit], has_more=len(events) > limit)


def get_event(uow: UnitOfWorkFactory, public_id: str, *, client_id: str | None) -> Event | None:
    if not is_event_id(public_id):
        return None
    with uow() as unit:
        event = unit.events.get(public_id, client_id=client_id)
        return None if event is None else shown_now(unit.payments, [event])[0]
