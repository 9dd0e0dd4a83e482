"""Stripe's objects as the protocol's: a PaymentIntent as ``ProviderPayment``, a Refund as
``ProviderRefund``, an Event as ``ProviderEvent``.  Every Stripe field name stops here.

Webhooks: ``parse_webhook_event`` verifies ``Stripe-Signature`` with the SDK
(``stripe.Webhook.construct_event``) and raises ``WebhookSignatureInvalid`` for anything it
refuses, so no caller needs ``stripe`` for that either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import stripe

from orchestrator.providers import keys
from orchestrator.providers.base import (
    BalanceMovement,
    DisputeFacts,
    PaymentError,
    ProviderEvent,
    ProviderPayment,
    ProviderRefund,
    WebhookSignatureInvalid,
)
from orchestrator.providers.stripe_declines import decline_class

# How old a webhook's signed timestamp may be (Stripe's own default): a captured request
# replayed later than this is refused.  Shorter would refuse genuine deliveries from a host
# whose clock is a little off; longer widens the replay window.
WEBHOOK_TOLERANCE_SECONDS = 300


def to_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, stripe.StripeObject):
        return value.to_dict()
    return dict(value) if isinstance(value, Mapping) else {}


def parse_intent(intent: Any) -> ProviderPayment:
    """A Stripe PaymentIntent (SDK object or plain dict) as our ``ProviderPayment``."""
    raw = to_dict(intent)
    error = raw.get("last_payment_error")
    latest_charge = raw.get("latest_charge")
    if isinstance(latest_charge, Mapping):  # expanded
        latest_charge = latest_charge.get("id")
    amount_received = raw.get("amount_received")
    return ProviderPayment(
        id=str(raw["id"]),
        status=str(raw["status"]),
        amount=int(raw["amount"]),
        currency=str(raw["currency"]),
        metadata={str(k): str(v) for k, v in (raw.get("metadata") or {}).items()},
        latest_charge=str(latest_charge) if latest_charge else None,
        last_payment_error=(
            PaymentError(
                code=error.get("code"),
                decline_code=error.get("decline_code"),
                message=error.get("message"),
                payment_method=_id_of(error.get("payment_method")),
                kind=decline_class(error.get("code"), error.get("decline_code")),
            )
            if isinstance(error, Mapping)
            else None
        ),
        created=int(raw["created"]) if raw.get("created") is not None else None,
        payment_method=_id_of(raw.get("payment_method")),
        customer=_id_of(raw.get("customer")),
        capture_method=str(raw.get("capture_method") or "automatic"),
        amount_received=int(amount_received) if amount_received is not None else None,
        amount_capturable=int(raw.get("amount_capturable") or 0),
        next_action=(
            dict(raw["next_action"]) if isinstance(raw.get("next_action"), Mapping) else None
        ),
        client_token=str(raw["client_secret"]) if raw.get("client_secret") else None,
        cancellation_reason=(
            str(raw["cancellation_reason"]) if raw.get("cancellation_reason") else None
        ),
        raw=raw,
    )


def parse_refund(refund: Any) -> ProviderRefund:
    """A Stripe Refund (SDK object or plain dict) as our ``ProviderRefund``."""
    raw = to_dict(refund)
    created = raw.get("created")
    return ProviderRefund(
        id=str(raw["id"]),
        provider_payment_id=_id_of(raw.get("payment_intent")) or "",
        amount=int(raw["amount"]),
        currency=str(raw["currency"]),
        status=str(raw.get("status") or "pending"),
        metadata={str(k): str(v) for k, v in (raw.get("metadata") or {}).items()},
        reason=str(raw["reason"]) if raw.get("reason") else None,
        failure_reason=str(raw["failure_reason"]) if raw.get("failure_reason") else None,
        created=int(created) if created is not None else None,
        raw=raw,
    )


# -- webhooks --------------------------------------------------------------------------


# Stripe's balance transaction types as the protocol's ``BalanceMovement.kind``: the money of
# a card charge (``charge``) or of another payment method's (``payment``), of a refund
# (``refund``, ``payment_refund``) and of a failed refund coming back (``refund_failure``,
# ``payment_failure_refund``).  Every other type (fees, payouts, dispute ``adjustment``s,
# transfers) is ``other``: not compared (decision 0108).
_MOVEMENT_KINDS = {
    "charge": "payment",
    "payment": "payment",
    "refund": "refund",
    "payment_refund": "refund",
    "refund_failure": "refund_reversal",
    "payment_failure_refund": "refund_reversal",
}


def parse_balance_transaction(txn: Mapping[str, Any]) -> BalanceMovement:
    """A Stripe balance transaction (plain dict; its ``source`` expanded or an id) as our
    ``BalanceMovement``.  Our reference is read from the expanded source: a charge carries
    its PaymentIntent's metadata (our payment id), a refund its own (our refund id)."""
    source = txn.get("source")
    reference: str | None = None
    refunded_charge: str | None = None
    if isinstance(source, Mapping):
        metadata = source.get("metadata") or {}
        if source.get("object") == "refund":
            reference = metadata.get(keys.REFUND_ID_METADATA_KEY) or None
            refunded_charge = _id_of(source.get("charge"))
        else:
            reference = metadata.get(keys.RECORD_ID_METADATA_KEY) or None
    return BalanceMovement(
        id=str(txn["id"]),
        kind=_MOVEMENT_KINDS.get(str(txn.get("type")), "other"),
        amount=int(txn["amount"]),
        currency=str(txn["currency"]),
        source=_id_of(source),
        created=int(txn["created"]),
        reference=str(reference) if reference else None,
        refunded_charge=refunded_charge,
    )


def parse_webhook_event(payload: bytes, signature_header: str | None, secret: str) -> ProviderEvent:
    """A webhook Stripe signed (``Stripe-Signature: t=…,v1=…``, HMAC-SHA256 of
    ``"{t}.{payload}"`` with the endpoint's ``whsec_`` secret), verified by the SDK with a
    300 s tolerance, as our ``ProviderEvent``.

    A missing, wrong or stale signature, or a body that is not an event, raises
    ``WebhookSignatureInvalid``: the route answers 400 and stores nothing.  Verification is
    the SDK's (``stripe.Webhook.construct_event``), never ours: constant-time comparison,
    several ``v1`` signatures during a secret roll, the timestamp check.
    """
    try:
        event = stripe.Webhook.construct_event(
            payload, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS
        )
    except stripe.SignatureVerificationError as exc:
        raise WebhookSignatureInvalid(
            f"Stripe-Signature rejected: {exc.user_message or exc}"
        ) from exc
    except ValueError as exc:  # the body is not JSON (the signature matched bytes, not an event)
        raise WebhookSignatureInvalid(f"the webhook body is not a Stripe event: {exc}") from exc
    return event_from_dict(to_dict(event))


def event_from_dict(raw: Mapping[str, Any]) -> ProviderEvent:
    """A Stripe Event (already verified, or listed from ``/v1/events``) as ``ProviderEvent``."""
    data = raw.get("data")
    obj = data.get("object") if isinstance(data, Mapping) else None
    if not isinstance(obj, Mapping) or not raw.get("id") or not raw.get("type"):
        raise WebhookSignatureInvalid("the webhook body is not a Stripe event (no data.object)")
    object_type = str(obj.get("object") or "")
    object_id = str(obj.get("id") or "")
    intent = object_id if object_type == "payment_intent" else _id_of(obj.get("payment_intent"))
    dispute = None
    if object_type == "dispute":
        dispute = DisputeFacts(
            amount=int(obj.get("amount") or 0),
            currency=str(obj.get("currency") or ""),
            reason=str(obj["reason"]) if obj.get("reason") else None,
            status=str(obj.get("status") or "needs_response"),
        )
    return ProviderEvent(
        id=str(raw["id"]),
        type=str(raw["type"]),
        created=int(raw.get("created") or 0),
        object_id=object_id,
        object_type=object_type,
        provider_payment_id=intent,
        raw=dict(raw),
        dispute=dispute,
    )


def _id_of(value: Any) -> str | None:
    """An id field, expanded (an object) or not (a string)."""
    if isinstance(value, Mapping):
        value = value.get("id")
    return str(value) if value else None
