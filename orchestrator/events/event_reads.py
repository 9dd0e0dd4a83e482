"""Reading events: a merchant's list (``GET /v1/events``) and one event."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.event_types import EVENT_TYPES, is_known_event_type
from orchestrator.domain.ids import is_event_id
from orchestrator.domain.webhooks import Event

DEFAULT_EVENT_LIMIT = 25
MAX_EVENT_LIMIT = 100


class InvalidEventQuery(ValueError):
    pass


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
    return EventPage(events=events[:limit], has_more=len(events) > limit)


def get_event(uow: UnitOfWorkFactory, public_id: str, *, client_id: str | None) -> Event | None:
    if not is_event_id(public_id):
        return None
    with uow() as unit:
        return unit.events.get(public_id, client_id=client_id)
