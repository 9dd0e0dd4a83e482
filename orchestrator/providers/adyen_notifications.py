"""Adyen's standard notifications -> the protocol's ``ProviderEvent``s, every item verified.

A notification request is ``{"live": "false", "notificationItems": [{"NotificationRequestItem":
{...}}, ...]}``; each item is signed on its own (``adyen_hmac``).  One bad or missing
signature refuses the whole request (``WebhookSignatureInvalid``: 401, nothing stored):
Adyen retries it, and a request we store half of would be answered ``[accepted]`` for items
we never verified.  A field we do not know is never a reason to refuse (Adyen's own examples
break their schemas).

Each item becomes one event, identified as Adyen's duplicates are (``pspReference``,
``eventCode``, ``success``, ``originalReference``; never a hash of the body, whose
``eventDate`` may differ between duplicates)::

    eventCode                       type (the protocol's vocabulary)      provider payment
    AUTHORISATION  success=true     payment_intent.succeeded              pspReference
                   success=false    payment_intent.payment_failed         pspReference
    CHARGEBACK, NOTIFICATION_OF_    charge.dispute.created (a dispute,    originalReference
    CHARGEBACK, SECOND_CHARGEBACK   with its amount and reason)
    anything else (captures,        adyen.{eventCode lower-case}           originalReference or
    cancellations, refunds, …)      (stored, wakes the payment)           pspReference

Cancellations are not ``payment_intent.canceled``: that type asks for an authorisation
check, a cancel of origin provider that Adyen's own cancels do not need.  Modification items
are stored and wake the payment and its waiting operations; the adapter then reads them back
as the outcome of our capture, cancel or refund (``adyen_modifications``, decision 0072).

``merchantReference`` is our record id on a payment's own items (we sent it as
``reference``; on a modification's items it is our operation id), carried as ``record_id``
on AUTHORISATION and TECHNICAL_CANCEL items: an authorisation whose answer was lost, and the
technical cancel that resolves it, find their payment by it, though payorch may never have
learnt the pspReference they name (a TECHNICAL_CANCEL may carry our cancel's own reference
instead: ``adyen_technical_cancel`` reads our record id from either).  Like every event, a
notification is a hint: it wakes the payment's operation, which reads Adyen's answer
through its own path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from orchestrator.providers.adyen_hmac import verify_item
from orchestrator.providers.adyen_technical_cancel import (
    AUTHORISATION,
    TECHNICAL_CANCEL,
    record_id_of,
)
from orchestrator.providers.base import (
    DisputeFacts,
    ProviderEvent,
    WebhookSignatureInvalid,
)

EVENT_ID_PREFIX = "adyen:"
CHARGEBACKS = frozenset({"CHARGEBACK", "NOTIFICATION_OF_CHARGEBACK", "SECOND_CHARGEBACK"})


def parse_notifications(payload: bytes, hmac_keys: str | Iterable[str]) -> list[ProviderEvent]:
    """Every item of a notification request, verified under one of ``hmac_keys`` (several
    while a key is rotated), as events; ``WebhookSignatureInvalid`` if any is not."""
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise WebhookSignatureInvalid("the body is not an Adyen notification (not JSON)") from exc
    wrappers = body.get("notificationItems") if isinstance(body, Mapping) else None
    if not isinstance(wrappers, list) or not wrappers:
        raise WebhookSignatureInvalid(
            "the body is not an Adyen notification (no notificationItems)"
        )
    keys = [hmac_keys] if isinstance(hmac_keys, str) else list(hmac_keys)
    events = []
    for position, wrapper in enumerate(wrappers):
        item = wrapper.get("NotificationRequestItem") if isinstance(wrapper, Mapping) else None
        if not isinstance(item, Mapping):
            raise WebhookSignatureInvalid(
                f"notification item {position} has no NotificationRequestItem"
            )
        if not verify_item(item, keys):
            raise WebhookSignatureInvalid(
                f"notification item {position} ({item.get('eventCode')}, "
                f"{item.get('pspReference')}): missing or wrong additionalData.hmacSignature"
            )
        events.append(event_from_item(item))
    return events


def event_from_item(item: Mapping[str, Any]) -> ProviderEvent:
    code = str(item.get("eventCode") or "")
    success = str(item.get("success") or "").lower() == "true"
    psp = _str(item.get("pspReference"))
    original = _str(item.get("originalReference"))
    if not code or psp is None:
        raise WebhookSignatureInvalid("a notification item without eventCode or pspReference")
    dispute = None
    object_type = "payment_intent"
    payment = original or psp
    if code == "AUTHORISATION":
        kind = "payment_intent.succeeded" if success else "payment_intent.payment_failed"
        payment = psp
    elif code in CHARGEBACKS:
        kind = "charge.dispute.created"
        object_type = "dispute"
        sent = item.get("amount")
        amount: Mapping[str, Any] = sent if isinstance(sent, Mapping) else {}
        dispute = DisputeFacts(
            amount=int(amount.get("value") or 0),
            currency=str(amount.get("currency") or "").lower(),
            reason=_str(item.get("reason")),
            status="needs_response",
        )
    else:
        kind = f"adyen.{code.lower()}"
    return ProviderEvent(
        id=f"{EVENT_ID_PREFIX}{psp}:{code}:{'true' if success else 'false'}:{original or ''}",
        type=kind,
        created=_epoch(item.get("eventDate")),
        object_id=psp,
        object_type=object_type,
        provider_payment_id=payment,
        raw=dict(item),
        dispute=dispute,
        record_id=_record_id(code, item),
    )


def _record_id(code: str, item: Mapping[str, Any]) -> str | None:
    reference = _str(item.get("merchantReference"))
    if reference is None or code not in (AUTHORISATION, TECHNICAL_CANCEL):
        return None
    return record_id_of(reference)


def _epoch(value: Any) -> int:
    try:
        return int(datetime.fromisoformat(str(value)).timestamp())
    except ValueError:
        return 0


def _str(value: Any) -> str | None:
    return None if value in (None, "", "null") else str(value)
