"""Adyen's technical cancel: the last rung of resolving an authorisation whose outcome is lost.

Checkout has no read of a payment.  The adapter resolves a ``POST /payments`` whose answer
was lost by replaying its key (``adyen_adapter``); when replays keep failing too, it sends
``POST /cancels`` by our reference instead and reads the answer from the notifications
payorch stored::

    POST /cancels  paymentReference = our record id (the authorisation's ``reference``),
                   reference = "{record id}-technical-cancel" (ours, for the cancel),
                   Idempotency-Key payorch-{record id}-technical-cancel (fixed: re-sending
                   it after a lost answer is the same request; a cancel moves no money)
    -> 201 received; the outcome is a TECHNICAL_CANCEL notification

How the stored notifications are read (``read_outcome``), first rule that applies::

    no TECHNICAL_CANCEL yet                         Awaiting (the caller: processing, the
                                                    payment waits for the notification)
    a failed one naming a payment (originalReference)
        whose AUTHORISATION success=true is stored  the authorisation stands: succeeded, or
                                                    requires_capture (manual capture); under
                                                    automatic capture it was captured before
                                                    the cancel came, which cannot undo it
        whose AUTHORISATION success=false is stored that payment was refused (nothing to
                                                    cancel): read on
        whose AUTHORISATION is not stored           Awaiting (money may have moved)
    a successful one                                cancelled: nothing charged; failed with
                                                    provider_unavailable, kind "provider"
    only refusals                                   refused, with the refusal's reason
    a failed one naming no payment                  Adyen had no payment with our reference:
                                                    nothing authorised; failed with
                                                    provider_unavailable, kind "provider"

Hazards:

* **Once the cancel is sent, the confirm's key is never replayed.**  A replay of a request
  Adyen never processed would process it now: an authorisation after the cancel, after we
  called the payment failed.  So every read past the threshold comes from here.
* A failed TECHNICAL_CANCEL without ``originalReference`` is our reading of "no payment
  with that reference" (Adyen documents the event, not this case; the simulator sends it
  so).  It cannot see a ``/payments`` request still in flight at Adyen when the cancel
  arrived; that request's authorisation would be an orphan for reconciliation to find.
* References are not unique at Adyen: a technical cancel acts on every payment with ours,
  and each gets its own notification; one authorisation that stands is enough to say
  money moved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from orchestrator.providers.adyen_declines import refusal
from orchestrator.providers.adyen_objects import placeholder
from orchestrator.providers.base import PaymentError, PaymentOrder, ProviderPayment

TECHNICAL_CANCEL = "TECHNICAL_CANCEL"
AUTHORISATION = "AUTHORISATION"
# Our reference for the cancel itself (Adyen shows it in the Customer Area and reports).
CANCEL_REFERENCE_SUFFIX = "-technical-cancel"
# The failure a payment ends with when the cancel proved nothing was charged: the provider
# could not answer, the card is not at fault, another provider may succeed.
FAILURE_CODE = "provider_unavailable"


class Awaiting(Exception):
    """The stored notifications do not settle the payment yet; the message says what is
    awaited."""


def cancel_reference(record_id: str) -> str:
    return f"{record_id}{CANCEL_REFERENCE_SUFFIX}"


def record_id_of(merchant_reference: str) -> str:
    """Our record id from a TECHNICAL_CANCEL's ``merchantReference``: the payment's
    reference, or our cancel's (either may be what Adyen carries)."""
    return merchant_reference.removesuffix(CANCEL_REFERENCE_SUFFIX)


def cancel_request(record_id: str, *, merchant_account: str) -> dict[str, Any]:
    """``POST /cancels`` (StandalonePaymentCancelRequest) for our payment's reference."""
    return {
        "merchantAccount": merchant_account,
        "paymentReference": record_id,
        "reference": cancel_reference(record_id),
    }


def read_outcome(payloads: Iterable[Mapping[str, Any]], order: PaymentOrder) -> ProviderPayment:
    """The payment as the stored notifications about it say (the module docstring's table),
    or ``Awaiting``."""
    ours = [p for p in payloads if _reference(p) == order.record_id]
    cancels = [p for p in ours if p.get("eventCode") == TECHNICAL_CANCEL]
    if not cancels:
        raise Awaiting(
            "technical cancel sent by our reference; its TECHNICAL_CANCEL notification has "
            "not arrived"
        )
    authorisations = {
        str(p.get("pspReference")): p for p in ours if p.get("eventCode") == AUTHORISATION
    }
    cancelled: list[Mapping[str, Any]] = []
    refused: list[Mapping[str, Any]] = []
    for item in cancels:
        original = _str(item.get("originalReference"))
        if _succeeded(item):
            cancelled.append(item)
            continue
        if original is None:
            continue  # nothing with our reference to cancel
        authorisation = authorisations.get(original)
        if authorisation is None:
            raise Awaiting(
                f"technical cancel {item.get('pspReference')} could not cancel payment "
                f"{original} ({item.get('reason') or 'no reason given'}); its AUTHORISATION "
                "notification has not arrived"
            )
        if _succeeded(authorisation):
            return _authorised(original, order)
        refused.append(authorisation)
    if cancelled:
        first = cancelled[0]
        original = _str(first.get("originalReference"))
        return _not_charged(
            order,
            original,
            f"Adyen's answers to the authorisation were lost; technical cancel "
            f"{first.get('pspReference')} cancelled authorisation {original}: nothing was "
            "charged",
        )
    if refused:
        return _refused(refused[0], order)
    return _not_charged(
        order,
        None,
        f"Adyen's answers to the authorisation were lost; technical cancel "
        f"{cancels[0].get('pspReference')} found no payment with our reference: nothing "
        "was authorised",
    )


def has_technical_cancel(payloads: Iterable[Mapping[str, Any]], record_id: str) -> bool:
    return any(
        p.get("eventCode") == TECHNICAL_CANCEL and _reference(p) == record_id for p in payloads
    )


def _authorised(psp_reference: str, order: PaymentOrder) -> ProviderPayment:
    manual = order.capture_method == "manual"
    return replace(
        placeholder(order),
        id=psp_reference,
        status="requires_capture" if manual else "succeeded",
        amount_received=None if manual else order.amount,
        amount_capturable=order.amount if manual else 0,
    )


def _not_charged(order: PaymentOrder, original: str | None, message: str) -> ProviderPayment:
    base = placeholder(order, status="requires_payment_method")
    return replace(
        base,
        id=original or base.id,
        last_payment_error=PaymentError(
            code=FAILURE_CODE, decline_code=None, message=message, kind="provider"
        ),
    )


def _refused(authorisation: Mapping[str, Any], order: PaymentOrder) -> ProviderPayment:
    meaning = refusal(None, _str(authorisation.get("reason")), result_code="Refused")
    base = placeholder(order, status="requires_payment_method")
    return replace(
        base,
        id=_str(authorisation.get("pspReference")) or base.id,
        last_payment_error=PaymentError(
            code=meaning.code,
            decline_code=None,
            message=f"Adyen refused the payment: {meaning.reason}",
            kind=meaning.kind,
        ),
    )


def _reference(item: Mapping[str, Any]) -> str:
    return record_id_of(str(item.get("merchantReference") or ""))


def _succeeded(item: Mapping[str, Any]) -> bool:
    return str(item.get("success") or "").lower() == "true"


def _str(value: Any) -> str | None:
    return None if value in (None, "", "null") else str(value)
