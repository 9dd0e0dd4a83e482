"""Receiving a provider's event (``POST /v1/providers/{provider}/webhooks``).

    body + signature   ─> verify (the adapter, through the provider's SDK) ─ bad ─> 400,
                                                                               nothing stored
      ─> one short transaction:
           already stored (same evt id) ─────────────> replay: 200, nothing changes
           store it, with our payment if the object is ours
           that payment deferred (nobody holds it) ──> due now: the sweeper dispatches it
           about its refunds ────────────────────────> a refund sync queued, due now
                                                       (``services.refund_sync``)
           its authorisation canceled (requires_capture) > an authorisation check queued,
                                                       due now (``services.captures``)
      ─> 200

**An event is a hint, never the truth.**  Nothing here applies what the event says: the
payment's operation, once dispatched, retrieves the provider payment from the provider and applies
it through the fenced path, so an event that arrives late, twice or out of order changes nothing
twice.  No provider call is made here (the route answers in milliseconds), and no transaction
is open across anything but the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from orchestrator.db.uow import UnitOfWork
from orchestrator.logging import get_logger
from orchestrator.providers.base import PAYMENT_CANCELED_EVENT, ProviderEvent
from orchestrator.services.captures import request_authorization_check
from orchestrator.services.disputes import record_dispute_event
from orchestrator.services.refund_sync import REFUND_EVENT_TYPES, request_refund_sync

log = get_logger(__name__)


# Verifies a webhook and reads it (the adapter's ``parse_webhook_event``); raises
# ``WebhookSignatureInvalid``.
ParseEvent = Callable[[bytes, str | None, str], ProviderEvent]


# Verifies a connector account's notification request under its keys and reads every item
# (the adapter's ``parse_notifications``); raises ``WebhookSignatureInvalid``.
ParseNotifications = Callable[[bytes, list[str]], list[ProviderEvent]]


class UnknownAccount(Exception):
    """The notification URL names no connector account of that provider."""


class WebhookSecretMissing(Exception):
    """No signing secret is configured: no event can be verified, so none is accepted."""


@dataclass(frozen=True)
class ReceivedEvent:
    id: str
    type: str
    duplicate: bool
    payment_id: str | None
    woke_payment: bool


def receive_provider_event(
    payload: bytes,
    signature: str | None,
    *,
    secret: str | None,
    parse: ParseEvent,
    uow: Callable[[], UnitOfWork],
    provider: str = "stripe",
) -> ReceivedEvent:
    """Verify, store once, wake; raises ``WebhookSignatureInvalid`` or
    ``WebhookSecretMissing`` before anything is written."""
    if not secret:
        raise WebhookSecretMissing(f"no webhook signing secret is configured for {provider}")
    event = parse(payload, signature, secret)
    return store_event(event, uow=uow, provider=provider)


def receive_account_notifications(
    payload: bytes,
    connector_account_id: str,
    *,
    provider: str,
    keys_of: Callable[[str], list[str] | None],
    parse: ParseNotifications,
    uow: Callable[[], UnitOfWork],
) -> list[ReceivedEvent]:
    """A connector account's notifications (Adyen's: several items, each signed with the
    account's key): verify every item, then store each once and wake its payment, as any
    provider event is.  ``UnknownAccount`` when the account is not this provider's;
    ``WebhookSignatureInvalid`` before anything is written."""
    keys = keys_of(connector_account_id)
    if keys is None:
        raise UnknownAccount(f"{connector_account_id} is not a {provider} connector account")
    events = parse(payload, keys)
    return [
        store_event(event, uow=uow, provider=provider, connector_account_id=connector_account_id)
        for event in events
    ]


def store_event(
    event: ProviderEvent,
    *,
    uow: Callable[[], UnitOfWork],
    provider: str,
    connector_account_id: str | None = None,
) -> ReceivedEvent:
    """Store a verified event once and wake its payment, in one short transaction.  An
    account's event finds only that account's payments: by the provider's id, or by our
    record id when the provider carries it back (an authorisation whose answer was lost,
    or the technical cancel that resolves one: the adapter decides which events carry it)."""
    with uow() as unit:
        now = unit.now()
        events = unit.provider_events
        payment_id = (
            events.payment_for_provider_payment(
                event.provider_payment_id, connector_account_id=connector_account_id
            )
            if event.provider_payment_id
            else None
        )
        if payment_id is None and event.record_id and connector_account_id is not None:
            payment_id = events.payment_on_account(event.record_id, connector_account_id)
        woke = payment_id is not None and events.make_deferred_payment_due(payment_id, now=now)
        try:
            stored = events.insert_once(
                event_id=event.id,
                provider=provider,
                event_type=event.type,
                provider_created=event.created,
                object_type=event.object_type,
                object_id=event.object_id,
                provider_payment_id=event.provider_payment_id,
                payment_id=payment_id,
                payload=event.raw,
                woke_payment=woke,
                now=now,
            )
            if not stored:
                # Already stored: leaving without a commit rolls the wake back too.
                return _replayed(event)
            if payment_id is not None:
                # A dispute is recorded (once per dispute) in the event's transaction.
                record_dispute_event(unit, event, payment_id, now=now)
                if event.type == PAYMENT_CANCELED_EVENT:
                    # Perhaps an authorisation that expired uncaptured: a check reads it.
                    request_authorization_check(unit, payment_id, now=now)
                if event.type in REFUND_EVENT_TYPES:
                    # Perhaps a refund made outside payorch: the sync lists the refunds.
                    request_refund_sync(
                        unit, payment_id, reason=f"{event.type} {event.id}", now=now
                    )
            unit.commit()
        except sa.exc.IntegrityError:
            # A concurrent delivery of the same event committed first (a provider can send one
            # event twice at once): it is stored, and this one changes nothing.
            return _replayed(event)
    log.info(
        "provider_event_received",
        provider=provider,
        event_id=event.id,
        event_type=event.type,
        payment_id=payment_id,
        woke_payment=woke,
    )
    return ReceivedEvent(event.id, event.type, False, payment_id, woke)


def _replayed(event: ProviderEvent) -> ReceivedEvent:
    log.info("provider_event_replayed", event_id=event.id, event_type=event.type)
    return ReceivedEvent(event.id, event.type, True, None, False)
