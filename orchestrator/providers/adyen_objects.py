"""Adyen's answers -> the protocol's objects, and our order -> Adyen's request bodies.

``resultCode`` of ``/payments`` and ``/payments/details`` -> the protocol's status::

    Authorised                        succeeded (automatic capture) or requires_capture (manual)
    Refused                           Declined(code = our snake_case reason, decline_code =
                                      refusalReasonCode, kind = card | provider)
    Error                             Declined(kind = provider): Adyen answered, nothing charged
    RedirectShopper, IdentifyShopper,
    ChallengeShopper                  requires_action, ``next_action`` = Adyen's ``action``
    Pending, Received                 processing (wait for the notification; never parked)
    Cancelled                         canceled
    anything else                     UnexpectedAnswer (the engine parks: we do not guess)

Modifications (capture, cancel, technical cancel, refund) answer ``received`` only
(``received`` checks it): their outcome is the notification's, read back by
``adyen_modifications`` (the technical cancel's by ``adyen_technical_cancel``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.providers.adyen_declines import refusal
from orchestrator.providers.base import (
    Declined,
    PaymentError,
    PaymentOrder,
    ProviderPayment,
)
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

# Before its authorisation a payment has no pspReference: Adyen knows it only by our
# ``reference`` (the record id).  Its provider payment id is this prefix and the reference
# until an answer names the pspReference (a 3-D Secure challenge does not).
REFERENCE_PREFIX = "reference:"

ACTION_CODES = frozenset({"RedirectShopper", "IdentifyShopper", "ChallengeShopper"})
WAITING_CODES = frozenset({"Pending", "Received"})


class UnexpectedAnswer(Exception):
    """An answer whose ``resultCode`` the adapter does not know: never read as a result."""


def placeholder(
    order: PaymentOrder,
    *,
    status: str = "requires_confirmation",
    cancellation_reason: str | None = None,
    awaiting: str | None = None,
) -> ProviderPayment:
    """The payment as Adyen knows it before (or without) an answer: by our reference.
    ``awaiting``: what a ``processing`` payment waits for."""
    return ProviderPayment(
        awaiting=awaiting,
        cancellation_reason=cancellation_reason,
        id=REFERENCE_PREFIX + order.record_id,
        status=status,
        amount=order.amount,
        currency=order.currency,
        metadata={**order.metadata, RECORD_ID_METADATA_KEY: order.record_id},
        payment_method=order.payment_method if isinstance(order.payment_method, str) else None,
        customer=order.customer,
        capture_method=order.capture_method,
    )


def payment_request(order: PaymentOrder, *, merchant_account: str) -> dict[str, Any]:
    """``POST /payments`` for our order: ``reference`` is our record id, manual capture
    requested per payment when the order asks for it."""
    body: dict[str, Any] = {
        "merchantAccount": merchant_account,
        "reference": order.record_id,
        "amount": {"currency": order.currency.upper(), "value": order.amount},
        "paymentMethod": payment_method_object(order.payment_method),
    }
    if order.return_url:
        body["returnUrl"] = order.return_url
    if order.description:
        body["shopperStatement"] = order.description[:22]
    if order.metadata:
        body["metadata"] = dict(order.metadata)
    if order.capture_method == "manual":
        body["additionalData"] = {"manualCapture": "true"}
    if order.customer:
        body["shopperReference"] = order.customer
        if order.off_session:
            body["shopperInteraction"] = "ContAuth"
            body["recurringProcessingModel"] = "UnscheduledCardOnFile"
    return body


def modification_request(
    merchant_account: str,
    reference: str,
    *,
    amount: int | None = None,
    currency: str | None = None,
) -> dict[str, Any]:
    """A capture, cancel or refund body: ``reference`` is our operation id, which Adyen
    carries back as the notification's ``merchantReference`` (how its outcome is found)."""
    body: dict[str, Any] = {"merchantAccount": merchant_account, "reference": reference}
    if amount is not None and currency is not None:
        body["amount"] = {"currency": currency.upper(), "value": amount}
    return body


def received(answer: dict[str, Any], step: str) -> dict[str, Any]:
    """A modification's answer: ``received`` with the modification's pspReference, or an
    answer the adapter does not read as one (the engine parks: we do not guess)."""
    if answer.get("status") != "received" or not answer.get("pspReference"):
        raise UnexpectedAnswer(f"Adyen answered the {step} with status {answer.get('status')!r}")
    return answer


def payment_method_object(method: Any) -> dict[str, Any]:
    """Adyen's ``paymentMethod``: the object the merchant sent, or a stored method's id."""
    if isinstance(method, dict):
        return dict(method)
    return {"type": "scheme", "storedPaymentMethodId": str(method)}


def parse_payment(answer: dict[str, Any], order: PaymentOrder) -> ProviderPayment:
    """What ``/payments`` or ``/payments/details`` answered, as a provider payment (or the
    decline it is).  Amount, currency, method and customer are the order's: Adyen's answer
    to our own keyed request for our reference does not repeat them."""
    code = str(answer.get("resultCode") or "")
    psp = answer.get("pspReference")
    if code in ("Refused", "Error"):
        meaning = refusal(
            _str(answer.get("refusalReasonCode")),
            _str(answer.get("refusalReason")),
            result_code=code,
        )
        raise Declined(
            f"Adyen answered {code}: {meaning.reason}",
            code=meaning.code,
            decline_code=_str(answer.get("refusalReasonCode")),
            provider_payment_id=_str(psp),
            kind=meaning.kind,
            http_status=200,
        )
    if code == "Authorised":
        manual = order.capture_method == "manual"
        status = "requires_capture" if manual else "succeeded"
        return _payment(
            answer,
            order,
            status=status,
            amount_received=None if manual else order.amount,
            amount_capturable=order.amount if manual else 0,
        )
    if code in ACTION_CODES:
        action = answer.get("action")
        next_action = {
            "type": "adyen_action",
            "adyen_action": action if isinstance(action, dict) else {},
        }
        return _payment(answer, order, status="requires_action", next_action=next_action)
    if code in WAITING_CODES:
        return _payment(answer, order, status="processing")
    if code == "Cancelled":
        return _payment(answer, order, status="canceled", cancellation_reason="abandoned")
    raise UnexpectedAnswer(f"Adyen answered resultCode {code or '(none)'}")


def refused_payment(declined: Declined, order: PaymentOrder) -> ProviderPayment:
    """A refusal as a read returns it: ``requires_payment_method`` with the decline as its
    last payment error (what a provider payment whose confirm was declined looks like)."""
    base = placeholder(order, status="requires_payment_method")
    return replace(
        base,
        id=declined.provider_payment_id or base.id,
        last_payment_error=PaymentError(
            code=declined.code,
            decline_code=declined.decline_code,
            message=declined.message,
            kind=declined.kind,
        ),
    )


def _payment(answer: dict[str, Any], order: PaymentOrder, **fields: Any) -> ProviderPayment:
    psp = _str(answer.get("pspReference"))
    base = placeholder(order)
    return ProviderPayment(
        id=psp or base.id,
        amount=base.amount,
        currency=base.currency,
        metadata=base.metadata,
        payment_method=base.payment_method,
        customer=base.customer,
        capture_method=base.capture_method,
        raw=answer,
        **fields,
    )


def _str(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
