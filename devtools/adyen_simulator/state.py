"""The simulated Adyen account: payments, their modifications, the money that moved and the
notifications each change causes.

    POST /payments ─> Authorised (auto-captured unless manual capture)   AUTHORISATION true
                   ─> Refused / Error / Cancelled                        AUTHORISATION false
                   ─> ChallengeShopper (3DS2 cards, and a shopper-present payment with a
                      stored 3DS2 card) ─ /payments/details ─> Authorised | Refused
                   ─> Pending (holderName PENDING) ─ /_sim/payments/{psp}/settle ─> …
    captures   ≤ the authorised amount left, same currency; manual capture only  CAPTURE
    cancels    an authorisation nothing was captured from                         CANCELLATION
    /cancels   (technical cancel by our reference) the same rule                  TECHNICAL_CANCEL
    refunds    their sum ≤ the captured sum                                       REFUND
    reversals  cancel if uncaptured, else refund what is left                     CANCEL_OR_REFUND
    /_sim      a chargeback of captured money; expiry of an open authorisation    CHARGEBACK, EXPIRE

A modification always answers ``201 received``; a rule it breaks shows up only in its
notification (``success: "false"`` with a ``reason``).  Its notifications carry the
modification's ``reference`` as ``merchantReference`` when the request had one (as Adyen's
refund example does), else the payment's.  holderName ``capture failed`` /
``refund failed`` make a successful CAPTURE / REFUND fail later (CAPTURE_FAILED /
REFUND_FAILED, which carry ``success: "true"``: the event code is the failure).

Not thread-safe on its own: the caller holds the simulator's lock.  Reason texts on failed
modifications are ours (Adyen publishes no list).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import secrets
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from devtools.adyen_simulator import errors, testdata
from devtools.adyen_simulator.config import AdyenSimulatorConfig

PaymentStatus = Literal[
    "challenge", "pending", "authorised", "refused", "error", "cancelled", "expired"
]
_PSP_ALPHABET = string.ascii_uppercase + string.digits
# The 3-D Secure result that authenticates (base64 of ``{"transStatus": "Y"}``, Adyen's own
# example); any other transStatus fails the challenge.
PASSING_TRANS_STATUS = "Y"


def new_psp_reference() -> str:
    """A 16-character pspReference like Adyen's test ones (``V4HZ4RBFJGXXGN82``)."""
    return "".join(secrets.choice(_PSP_ALPHABET) for _ in range(16))


def three_ds_result(authorisation_token: str | None = None, *, succeed: bool = True) -> str:
    """The ``details.threeDSResult`` a shopper's 3DS2 component would produce: base64 JSON
    with ``transStatus`` (``Y`` passes, ``N`` fails) and, optionally, the action's
    ``authorisationToken`` (which names the payment when ``paymentData`` is not sent)."""
    data: dict[str, str] = {"transStatus": PASSING_TRANS_STATUS if succeed else "N"}
    if authorisation_token is not None:
        data["authorisationToken"] = authorisation_token
    return base64.b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).astimezone().isoformat(timespec="seconds")


@dataclass
class Payment:
    psp_reference: str
    reference: str
    merchant_account: str
    currency: str
    value: int
    status: PaymentStatus
    brand: str
    holder_name: str | None
    manual_capture: bool
    card_summary: str | None = None
    shopper_reference: str | None = None
    stored_payment_method_id: str | None = None
    outcome: testdata.Outcome = testdata.AUTHORISED
    payment_data: str | None = None
    authorisation_token: str | None = None
    captured: int = 0
    refunded: int = 0
    # No more captures: cancelled, or a partial capture closed the remainder.
    closed: bool = False
    final_response: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pspReference": self.psp_reference,
            "reference": self.reference,
            "merchantAccount": self.merchant_account,
            "amount": {"currency": self.currency, "value": self.value},
            "status": self.status,
            "paymentMethod": self.brand,
            "manualCapture": self.manual_capture,
            "captured": self.captured,
            "refunded": self.refunded,
            "closed": self.closed,
            "shopperReference": self.shopper_reference,
        }


@dataclass
class Movement:
    """Money that moved at the simulated Adyen: an authorisation, a capture, a refund or a
    cancel.  ``failed`` when a late failure (CAPTURE_FAILED, REFUND_FAILED) undid it."""

    kind: Literal["authorisation", "capture", "refund", "cancel", "refusal", "chargeback"]
    psp_reference: str
    payment_psp_reference: str
    reference: str
    currency: str
    value: int
    failed: bool = False
    # The modification's own reference (our operation id), when its request had one.
    modification_reference: str | None = None
    # When it happened (the settlement details report's Creation Date).
    at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    # The settlement batch it was paid out in (``settlement.py``); None: not yet settled.
    batch: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pspReference": self.psp_reference,
            "paymentPspReference": self.payment_psp_reference,
            "reference": self.reference,
            "amount": {"currency": self.currency, "value": self.value},
            "failed": self.failed,
        }


Notify = Callable[[dict[str, Any]], None]


@dataclass
class AccountState:
    config: AdyenSimulatorConfig
    notify: Notify
    payments: dict[str, Payment] = field(default_factory=dict)
    by_payment_data: dict[str, str] = field(default_factory=dict)
    movements: list[Movement] = field(default_factory=list)

    # -- /payments ------------------------------------------------------------------------

    def authorise(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        amount = _amount(body.get("amount"))
        reference = body.get("reference")
        if not isinstance(reference, str) or not reference:
            raise errors.reference_missing()
        if len(reference) > 80:
            raise errors.invalid_field("reference", "at most 80 characters")
        method = body.get("paymentMethod")
        if not isinstance(method, dict):
            raise errors.required_field("paymentMethod")
        shopper_reference = _optional_str(body, "shopperReference")
        stored_id = method.get("storedPaymentMethodId")
        number = testdata.card_number(method)
        if stored_id is not None:
            if not isinstance(stored_id, str) or not stored_id:
                raise errors.invalid_field("paymentMethod.storedPaymentMethodId", "a string")
            if shopper_reference is None:
                raise errors.invalid_field(
                    "shopperReference", "required with a storedPaymentMethodId"
                )
        elif number is None:
            raise errors.required_field("paymentMethod.encryptedCardNumber")
        elif not testdata.luhn_valid(number):
            raise errors.invalid_card_number()
        additional = body.get("additionalData")
        additional = additional if isinstance(additional, dict) else {}
        delay = body.get("captureDelayHours")
        if delay is not None and (not isinstance(delay, int) or not 0 <= delay <= 672):
            raise errors.invalid_field("captureDelayHours", "an integer within 0..672")
        manual = str(additional.get("manualCapture", "")).lower() == "true" or bool(delay)
        holder = method.get("holderName")
        holder = holder if isinstance(holder, str) else None
        requested = additional.get("RequestedTestAcquirerResponseCode")
        outcome = testdata.outcome_for(
            holder,
            str(requested) if requested is not None else None,
            stored_id if isinstance(stored_id, str) else None,
        )
        payment = Payment(
            psp_reference=new_psp_reference(),
            reference=reference,
            merchant_account=str(body["merchantAccount"]),
            currency=amount[0],
            value=amount[1],
            status="pending",
            brand=testdata.brand(number) if stored_id is None else "visa",
            holder_name=holder,
            manual_capture=manual,
            card_summary=number[-4:] if number else None,
            shopper_reference=shopper_reference,
            stored_payment_method_id=stored_id if isinstance(stored_id, str) else None,
            outcome=outcome,
        )
        if body.get("storePaymentMethod") is True and shopper_reference is not None:
            payment.stored_payment_method_id = new_psp_reference()
        self.payments[payment.psp_reference] = payment
        if number in testdata.THREEDS2_CARDS or testdata.challenges_stored(
            stored_id, shopper_interaction=body.get("shopperInteraction")
        ):
            return 200, self._challenge(payment)
        return 200, self._decide(payment, outcome)

    def _challenge(self, payment: Payment) -> dict[str, Any]:
        payment.status = "challenge"
        payment.payment_data = "Ab02b4c0!" + secrets.token_urlsafe(24)
        payment.authorisation_token = "Ab02b4c0!" + secrets.token_urlsafe(18)
        self.by_payment_data[payment.payment_data] = payment.psp_reference
        self.by_payment_data[payment.authorisation_token] = payment.psp_reference
        token = {
            "acsReferenceNumber": "ADYEN-ACS-SIMULATOR",
            "acsTransID": secrets.token_hex(16),
            "messageVersion": "2.2.0",
            "threeDSServerTransID": secrets.token_hex(16),
        }
        return {
            "resultCode": "ChallengeShopper",
            "merchantReference": payment.reference,
            "action": {
                "type": "threeDS2",
                "subtype": "challenge",
                "paymentMethodType": "scheme",
                "paymentData": payment.payment_data,
                "authorisationToken": payment.authorisation_token,
                "token": base64.b64encode(json.dumps(token).encode()).decode(),
            },
        }

    def _decide(self, payment: Payment, outcome: testdata.Outcome) -> dict[str, Any]:
        """Give ``payment`` its outcome: the answer, the money log, the notification."""
        response: dict[str, Any] = {
            "pspReference": payment.psp_reference,
            "resultCode": outcome.result_code,
            "merchantReference": payment.reference,
            "amount": {"currency": payment.currency, "value": payment.value},
        }
        if outcome.result_code == "Pending":
            payment.status = "pending"
            return response
        if outcome.result_code == "Authorised":
            payment.status = "authorised"
            auth_code = f"{secrets.randbelow(1_000_000):06d}"
            additional = {"authCode": auth_code, "refusalReasonRaw": "AUTHORISED"}
            if payment.card_summary:
                additional["cardSummary"] = payment.card_summary
                additional["expiryDate"] = "03/2030"
            if payment.stored_payment_method_id and payment.shopper_reference:
                additional["recurring.recurringDetailReference"] = payment.stored_payment_method_id
                additional["recurring.shopperReference"] = payment.shopper_reference
            response["additionalData"] = additional
            self._move("authorisation", payment, payment.psp_reference, payment.value)
            if not payment.manual_capture:
                payment.captured = payment.value
                payment.closed = True
            self._notify(
                payment,
                "AUTHORISATION",
                success=True,
                psp_reference=payment.psp_reference,
                value=payment.value,
                reason=f"{auth_code}:{payment.card_summary or ''}:03/2030",
                operations=["CANCEL", "CAPTURE", "REFUND"],
                additional={k: v for k, v in additional.items() if k != "refusalReasonRaw"},
            )
        else:
            statuses: dict[str, PaymentStatus] = {
                "Refused": "refused",
                "Error": "error",
                "Cancelled": "cancelled",
            }
            payment.status = statuses[outcome.result_code]
            payment.closed = True
            response["refusalReason"] = outcome.refusal_reason or "Refused"
            if outcome.refusal_code is not None:
                response["refusalReasonCode"] = outcome.refusal_code
            self._move("refusal", payment, payment.psp_reference, payment.value)
            self._notify(
                payment,
                "AUTHORISATION",
                success=False,
                psp_reference=payment.psp_reference,
                value=payment.value,
                reason=outcome.refusal_reason or "Refused",
            )
        payment.final_response = response
        return response

    # -- /payments/details ------------------------------------------------------------------

    def details(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        details = body.get("details")
        if not isinstance(details, dict):
            raise errors.required_field("details")
        result = details.get("threeDSResult")
        if not isinstance(result, str) or not result:
            raise errors.required_field("details.threeDSResult")
        try:
            decoded = json.loads(base64.b64decode(result, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise errors.payment_data_unknown() from exc
        if not isinstance(decoded, dict):
            raise errors.payment_data_unknown()
        handle = body.get("paymentData") or decoded.get("authorisationToken")
        psp = self.by_payment_data.get(handle) if isinstance(handle, str) else None
        payment = self.payments.get(psp) if psp else None
        if payment is None:
            raise errors.payment_data_unknown()
        if payment.status != "challenge":
            # The challenge was already answered: the payment's result again.
            if payment.final_response is not None:
                return 200, payment.final_response
            raise errors.payment_data_unknown()
        if decoded.get("transStatus") == PASSING_TRANS_STATUS:
            response = self._decide(payment, payment.outcome)
            if response["resultCode"] == "Authorised":
                response["additionalData"]["liabilityShift"] = "true"
            return 200, response
        return 200, self._decide(payment, testdata.Outcome("Refused", "11"))

    # -- test-only: a pending payment settles ---------------------------------------------

    def settle(self, psp_reference: str, *, authorised: bool) -> dict[str, Any]:
        payment = self.payments[psp_reference]
        if payment.status != "pending":
            raise ValueError(f"payment {psp_reference} is {payment.status}, not pending")
        outcome = testdata.AUTHORISED if authorised else testdata.Outcome("Refused", "2")
        return self._decide(payment, outcome)

    # -- test-only: what happens to a payment outside the API ---------------------------

    def chargeback(
        self, psp_reference: str, *, value: int | None, reason_code: str
    ) -> dict[str, Any]:
        """The shopper's bank takes money back: a CHARGEBACK notification (shaped as Adyen's
        example: its own pspReference, the payment's as originalReference)."""
        payment = self.payments[psp_reference]
        kept = payment.captured - payment.refunded
        amount = kept if value is None else value
        if kept <= 0:
            raise ValueError(f"payment {psp_reference} has no captured money to dispute")
        if not 0 < amount <= kept:
            raise ValueError(f"a chargeback is within 1..{kept}")
        psp = new_psp_reference()
        self._move("chargeback", payment, psp, amount)
        self._notify(
            payment,
            "CHARGEBACK",
            success=True,
            psp_reference=psp,
            value=amount,
            original=True,
            reason=f"Chargeback {reason_code}",
            additional={
                "chargebackReasonCode": reason_code,
                "chargebackSchemeCode": payment.brand,
                "defendable": "true",
                "disputeStatus": "Undefended",
            },
        )
        return {"pspReference": psp, "paymentPspReference": payment.psp_reference, "amount": amount}

    def fail_later(self, psp_reference: str, modification: str) -> dict[str, Any]:
        """(ours) The payment's later captures or refunds fail at the scheme, as Adyen's test
        holderName ``capture failed`` / ``refund failed`` makes them: for a payment made
        with a stored method, whose request carries no holderName."""
        payment = self.payments[psp_reference]
        holders = {
            "capture": testdata.CAPTURE_FAILED_HOLDER,
            "refund": testdata.REFUND_FAILED_HOLDER,
        }
        if modification not in holders:
            raise ValueError(f"{modification!r}: capture or refund")
        payment.holder_name = holders[modification]
        return payment.to_json()

    def expire(self, psp_reference: str) -> dict[str, Any]:
        """An uncaptured authorisation (or its remainder) expires: an EXPIRE notification."""
        payment = self.payments[psp_reference]
        left = payment.value - payment.captured
        if payment.status != "authorised" or payment.closed or left <= 0:
            raise ValueError(f"payment {psp_reference} has no open authorisation to expire")
        payment.closed = True
        if payment.captured == 0:
            payment.status = "expired"
        self._notify(
            payment,
            "EXPIRE",
            success=True,
            psp_reference=payment.psp_reference,
            value=left,
            reason="",
        )
        return payment.to_json()

    # -- modifications -------------------------------------------------------------------

    def _payment(self, psp_reference: str | None) -> Payment:
        payment = self.payments.get(psp_reference or "")
        if payment is None:
            raise errors.unknown_payment(psp_reference or "")
        return payment

    def _received(
        self, body: dict[str, Any], payment: Payment | None, *, amount: bool
    ) -> dict[str, Any]:
        response: dict[str, Any] = {
            "merchantAccount": body["merchantAccount"],
            "pspReference": new_psp_reference(),
            "status": "received",
        }
        if payment is not None:
            response["paymentPspReference"] = payment.psp_reference
        if isinstance(body.get("reference"), str):
            response["reference"] = body["reference"]
        if amount:
            response["amount"] = body["amount"]
        return response

    def capture(
        self, psp_reference: str | None, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        currency, value = _amount(body.get("amount"))
        payment = self._payment(psp_reference)
        response = self._received(body, payment, amount=True)
        mod = response["pspReference"]
        reference = _optional_str(body, "reference")
        reason = self._capture_refusal(payment, currency, value)
        if reason is not None:
            self._notify(
                payment,
                "CAPTURE",
                success=False,
                psp_reference=mod,
                value=value,
                original=True,
                reason=reason,
                currency=currency,
                reference=reference,
            )
            return 201, response
        payment.captured += value
        if not self.config.multiple_partial_captures:
            payment.closed = True
        self._move("capture", payment, mod, value, reference)
        self._notify(
            payment,
            "CAPTURE",
            success=True,
            psp_reference=mod,
            value=value,
            original=True,
            reference=reference,
        )
        if payment.holder_name == testdata.CAPTURE_FAILED_HOLDER:
            payment.captured -= value
            self._fail_movement(mod)
            self._notify(
                payment,
                "CAPTURE_FAILED",
                success=True,
                psp_reference=mod,
                value=value,
                original=True,
                reason="Capture failed at the scheme",
                reference=reference,
            )
        return 201, response

    def _capture_refusal(self, payment: Payment, currency: str, value: int) -> str | None:
        if payment.status != "authorised":
            return f"Payment is {payment.status}, not authorised"
        if not payment.manual_capture:
            return "Payment was captured automatically"
        if currency != payment.currency:
            return "Currency mismatch"
        if payment.closed:
            return "Authorisation is closed (cancelled or already captured)"
        if value <= 0 or value > payment.value - payment.captured:
            return "Insufficient balance on payment"
        return None

    def cancel(self, psp_reference: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        payment = self._payment(psp_reference)
        response = self._received(body, payment, amount=False)
        self._cancel(
            payment, response["pspReference"], "CANCELLATION", _optional_str(body, "reference")
        )
        return 201, response

    def _cancel(self, payment: Payment, mod: str, event: str, reference: str | None = None) -> bool:
        reason = None
        if payment.status not in ("authorised", "pending", "challenge"):
            reason = f"Payment is {payment.status}"
        elif payment.captured > 0:
            reason = "Payment already captured"
        elif payment.closed:
            reason = "Authorisation is closed"
        if reason is not None:
            self._notify(
                payment,
                event,
                success=False,
                psp_reference=mod,
                value=payment.value,
                original=True,
                reason=reason,
                reference=reference,
            )
            return False
        was_authorised = payment.status == "authorised"
        payment.status = "cancelled"
        payment.closed = True
        if was_authorised:
            self._move("cancel", payment, mod, payment.value)
        self._notify(
            payment,
            event,
            success=True,
            psp_reference=mod,
            value=payment.value,
            original=True,
            reference=reference,
        )
        return True

    def technical_cancel(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reference = body.get("paymentReference")
        if not isinstance(reference, str) or not reference:
            raise errors.required_field("paymentReference")
        merchant = body["merchantAccount"]
        response = self._received(body, None, amount=False)
        response["paymentReference"] = reference
        mod = response["pspReference"]
        found = [
            p
            for p in self.payments.values()
            if p.reference == reference and p.merchant_account == merchant
        ]
        # References are not unique at Adyen: every payment made with it is cancelled.
        for payment in found:
            self._cancel(payment, mod, "TECHNICAL_CANCEL")
        if not found:
            # (ours) Adyen publishes no body for this case: a failed TECHNICAL_CANCEL with no
            # originalReference says nothing with this reference exists to cancel.
            self.notify(
                _item(
                    "TECHNICAL_CANCEL",
                    success=False,
                    psp_reference=mod,
                    merchant_account=merchant,
                    merchant_reference=reference,
                    currency="EUR",
                    value=0,
                    reason="Original payment not found",
                )
            )
        return 201, response

    def refund(self, psp_reference: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        currency, value = _amount(body.get("amount"))
        payment = self._payment(psp_reference)
        response = self._received(body, payment, amount=True)
        mod = response["pspReference"]
        self._refund(
            payment, mod, currency, value, "REFUND", reference=_optional_str(body, "reference")
        )
        return 201, response

    def _refund(
        self,
        payment: Payment,
        mod: str,
        currency: str,
        value: int,
        event: str,
        additional: dict[str, str] | None = None,
        reference: str | None = None,
    ) -> bool:
        reason = None
        if currency != payment.currency:
            reason = "Currency mismatch"
        elif value <= 0 or value > payment.captured - payment.refunded:
            reason = "Insufficient balance on payment"
        if reason is not None:
            self._notify(
                payment,
                event,
                success=False,
                psp_reference=mod,
                value=value,
                original=True,
                reason=reason,
                currency=currency,
                additional=additional,
                reference=reference,
            )
            return False
        payment.refunded += value
        self._move("refund", payment, mod, value, reference)
        self._notify(
            payment,
            event,
            success=True,
            psp_reference=mod,
            value=value,
            original=True,
            additional=additional,
            reference=reference,
        )
        if payment.holder_name == testdata.REFUND_FAILED_HOLDER and event == "REFUND":
            payment.refunded -= value
            self._fail_movement(mod)
            self._notify(
                payment,
                "REFUND_FAILED",
                success=True,
                psp_reference=mod,
                value=value,
                original=True,
                reason="Refund failed at the scheme",
                reference=reference,
            )
        return True

    def reversal(
        self, psp_reference: str | None, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        payment = self._payment(psp_reference)
        response = self._received(body, payment, amount=False)
        mod = response["pspReference"]
        if payment.status == "authorised" and payment.captured == 0 and not payment.closed:
            payment.status = "cancelled"
            payment.closed = True
            self._move("cancel", payment, mod, payment.value)
            self._notify(
                payment,
                "CANCEL_OR_REFUND",
                success=True,
                psp_reference=mod,
                value=payment.value,
                original=True,
                additional={"modification.action": "cancel"},
            )
        elif payment.status == "authorised" and payment.captured > payment.refunded:
            self._refund(
                payment,
                mod,
                payment.currency,
                payment.captured - payment.refunded,
                "CANCEL_OR_REFUND",
                additional={"modification.action": "refund"},
            )
        else:
            self._notify(
                payment,
                "CANCEL_OR_REFUND",
                success=False,
                psp_reference=mod,
                value=payment.value,
                original=True,
                reason=f"Nothing to cancel or refund (payment is {payment.status})",
            )
        return 201, response

    # -- the money log and the notifications ----------------------------------------------

    def _move(
        self, kind: Any, payment: Payment, psp: str, value: int, reference: str | None = None
    ) -> None:
        self.movements.append(
            Movement(
                kind,
                psp,
                payment.psp_reference,
                payment.reference,
                payment.currency,
                value,
                modification_reference=reference,
            )
        )

    def _fail_movement(self, psp: str) -> None:
        for movement in self.movements:
            if movement.psp_reference == psp:
                movement.failed = True

    def _notify(
        self,
        payment: Payment,
        event: str,
        *,
        success: bool,
        psp_reference: str,
        value: int,
        original: bool = False,
        reason: str | None = None,
        currency: str | None = None,
        operations: list[str] | None = None,
        additional: dict[str, str] | None = None,
        reference: str | None = None,
    ) -> None:
        self.notify(
            _item(
                event,
                success=success,
                psp_reference=psp_reference,
                original_reference=payment.psp_reference if original else None,
                merchant_account=payment.merchant_account,
                # A modification's own reference when its request had one (Adyen's
                # refund example carries "payment-…-refund"), else the payment's.
                merchant_reference=reference or payment.reference,
                currency=currency or payment.currency,
                value=value,
                reason=reason,
                payment_method=payment.brand,
                operations=operations,
                additional=additional,
            )
        )

    def summary(self) -> dict[str, Any]:
        """Money that moved, for "exactly once" assertions (``GET /_sim/movements``)."""
        out: dict[str, Any] = {}
        for kind in ("authorisation", "capture", "refund", "cancel", "refusal", "chargeback"):
            items = [m for m in self.movements if m.kind == kind]
            done = [m for m in items if not m.failed]
            amount: Counter[str] = Counter()
            for m in done:
                amount[m.currency] += m.value
            out[kind + "s"] = {
                "total": len(done),
                "amount": dict(amount),
                "by_reference": dict(Counter(m.reference for m in done)),
                "by_payment": dict(Counter(m.payment_psp_reference for m in done)),
                "items": [m.to_json() for m in items],
            }
        return out


def _item(
    event: str,
    *,
    success: bool,
    psp_reference: str,
    merchant_account: str,
    merchant_reference: str,
    currency: str,
    value: int,
    original_reference: str | None = None,
    reason: str | None = None,
    payment_method: str | None = None,
    operations: list[str] | None = None,
    additional: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One NotificationRequestItem (unsigned; the sender signs it)."""
    item: dict[str, Any] = {
        "additionalData": dict(additional or {}),
        "amount": {"currency": currency, "value": value},
        "eventCode": event,
        "eventDate": _now_iso(),
        "merchantAccountCode": merchant_account,
        "merchantReference": merchant_reference,
        "pspReference": psp_reference,
        "success": "true" if success else "false",
    }
    if original_reference is not None:
        item["originalReference"] = original_reference
    if reason is not None:
        item["reason"] = reason
    if payment_method is not None:
        item["paymentMethod"] = payment_method
    if operations is not None and success:
        item["operations"] = operations
    return item


def _amount(raw: Any) -> tuple[str, int]:
    if raw is None:
        raise errors.amount_missing()
    if not isinstance(raw, dict):
        raise errors.invalid_field("amount", "an object with currency and value")
    currency, value = raw.get("currency"), raw.get("value")
    if not isinstance(currency, str) or len(currency) != 3:
        raise errors.invalid_field("amount.currency", "a 3-letter ISO 4217 code")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise errors.invalid_field("amount.value", "an integer >= 0 in minor units")
    return currency, value


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) and value else None
