"""An in-memory provider with Stripe's semantics that matter to the protocol, and a
script of faults.

It keeps what Stripe keeps: provider payments, one charge per provider payment at most, and saved
responses per idempotency key (errors included, as Stripe saves 500s).  Faults are scripted per
operation and per call number, e.g. ``fail("confirm", 1, "unknown_after_effect")``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.providers.base import (
    ACTION_RESULT_NOT_SUPPORTED,
    ActionResult,
    Declined,
    OutcomeUnknown,
    PaymentError,
    Permanent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    Retryable,
)
from orchestrator.providers.keys import (
    RECORD_ID_METADATA_KEY,
    cancel_key,
    capture_key,
    confirm_key,
    create_key,
    refund_key,
)

Operation = Literal[
    "create",
    "confirm",
    "retrieve",
    "lookup",
    "capture",
    "cancel",
    "refund",
    "retrieve_refund",
    "list_refunds",
]
Fault = Literal[
    "unknown_before_effect",  # timeout before the provider did anything
    "unknown_after_effect",  # the provider acted, then the connection died
    "saved_500_after_effect",  # the provider acted and saved a 500 under the key
    "rate_limited",  # 429 with retry_after
    "key_in_use",  # 409 idempotency_key_in_use
    "refused",  # 400 invalid_request_error, nothing done (saved under the key, as Stripe)
]

REFUSED_CODE = "charge_expired_for_capture"
REFUSED_MESSAGE = "The charge can no longer be captured (fake)."

# Cards whose issuer asks for 3-D Secure (Stripe's test tokens), and asynchronous ones.
AUTHENTICATION_CARDS = frozenset(
    {"pm_card_threeDSecure2Required", "pm_card_authenticationRequired"}
)
PROCESSING_CARDS = frozenset({"pm_card_sim_processingSucceeds"})

DECLINES = {
    "pm_card_chargeDeclined": "generic_decline",
    "pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
}


@dataclass
class Call:
    operation: Operation
    provider_payment_id: str | None
    key: str | None
    # The optional arguments the call carried (customer, off_session, return_url).
    params: dict[str, object] = field(default_factory=dict)


@dataclass
class _Intent:
    id: str
    amount: int
    currency: str
    payment_method: str
    metadata: dict[str, str]
    status: str = "requires_confirmation"
    charge: str | None = None
    error: PaymentError | None = None
    created: int = 0
    customer: str | None = None
    next_action: dict[str, object] | None = None
    client_token: str | None = None
    cancellation_reason: str | None = None
    capture_method: str = "automatic"
    amount_capturable: int = 0
    amount_received: int = 0


@dataclass
class FakeProvider:
    name: str = "stripe"
    # Stripe's semantics: the customer authenticates at the provider, nothing is forwarded.
    accepts_action_result = False
    retry_after: float = 2.0
    provider_payments: dict[str, _Intent] = field(default_factory=dict)
    saved: dict[str, ProviderPayment | Exception] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # The ``pending`` each retrieve was given (None when the engine resolved no call).
    pending_calls: list[object] = field(default_factory=list)
    charges: dict[str, int] = field(default_factory=dict)
    # Captures of manual-capture provider payments (provider payment id -> how many times it was
    # captured).
    captures: dict[str, int] = field(default_factory=dict)
    # Refunds as Stripe keeps them, in creation order.
    refunds: dict[str, ProviderRefund] = field(default_factory=dict)
    _faults: dict[tuple[Operation, int], Fault] = field(default_factory=dict)
    _counts: dict[Operation, int] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def fail(self, operation: Operation, call_number: int, fault: Fault) -> None:
        """Make the ``call_number``-th (1-based) call of ``operation`` fail with ``fault``."""
        self._faults[(operation, call_number)] = fault

    def movements(self, record_id: str) -> int:
        return sum(
            n
            for provider_payment_id, n in self.charges.items()
            if self.provider_payments[provider_payment_id].metadata.get(RECORD_ID_METADATA_KEY)
            == record_id
        )

    def _fault(self, operation: Operation) -> Fault | None:
        self._counts[operation] = self._counts.get(operation, 0) + 1
        return self._faults.get((operation, self._counts[operation]))

    def _view(self, provider_payment: _Intent) -> ProviderPayment:
        return ProviderPayment(
            id=provider_payment.id,
            status=provider_payment.status,
            amount=provider_payment.amount,
            currency=provider_payment.currency,
            metadata=dict(provider_payment.metadata),
            latest_charge=provider_payment.charge,
            last_payment_error=provider_payment.error,
            created=provider_payment.created,
            payment_method=provider_payment.payment_method,
            amount_received=provider_payment.amount_received,
            amount_capturable=provider_payment.amount_capturable,
            capture_method=provider_payment.capture_method,
            customer=provider_payment.customer,
            next_action=provider_payment.next_action,  # type: ignore[arg-type]
            client_token=provider_payment.client_token,
            cancellation_reason=provider_payment.cancellation_reason,
        )

    def add_intent(
        self,
        *,
        record_id: str | None,
        amount: int,
        currency: str = "usd",
        payment_method: str = "pm_card_visa",
        created: int | None = None,
    ) -> str:
        """A provider payment made outside payorch (another integration, the Dashboard)."""
        provider_payment = _Intent(
            id=f"pi_fake{next(self._ids)}",
            amount=amount,
            currency=currency,
            payment_method=payment_method,
            metadata={RECORD_ID_METADATA_KEY: record_id} if record_id else {},
            created=int(time.time()) if created is None else created,
        )
        self.provider_payments[provider_payment.id] = provider_payment
        return provider_payment.id

    def _with_key(self, key: str, fault: Fault | None, act: callable) -> ProviderPayment:  # type: ignore[valid-type]
        if key in self.saved:
            saved = self.saved[key]
            if isinstance(saved, Exception):
                raise saved
            return saved
        if fault == "unknown_before_effect":
            raise OutcomeUnknown("read timeout (fake)")
        if fault == "rate_limited":
            raise Retryable("rate limited (fake)", retry_after=self.retry_after, http_status=429)
        if fault == "key_in_use":
            raise Retryable(
                "idempotency key in use", code="idempotency_key_in_use", http_status=409
            )
        try:
            if fault == "refused":
                raise Permanent(REFUSED_MESSAGE, code=REFUSED_CODE, http_status=400)
            result: ProviderPayment | Exception = act()
        except (Declined, Permanent) as error:
            result = error
        if fault == "saved_500_after_effect":
            result = OutcomeUnknown("500 api_error (fake, saved)", http_status=500)
        self.saved[key] = result
        if fault == "unknown_after_effect":
            raise OutcomeUnknown("read timeout after the effect (fake)")
        if isinstance(result, Exception):
            raise result
        return result

    def create_payment(
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
        customer: str | None = None,
        capture_method: str = "automatic",
    ) -> ProviderPayment:
        key = create_key(record_id)
        params: dict[str, object] = {"customer": customer} if customer else {}
        if capture_method != "automatic":
            params["capture_method"] = capture_method
        self.calls.append(Call("create", None, key, params))
        fault = self._fault("create")

        def act() -> ProviderPayment:
            provider_payment = _Intent(
                id=f"pi_fake{next(self._ids)}",
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                metadata={**metadata, RECORD_ID_METADATA_KEY: record_id},
                created=int(time.time()),
                customer=customer,
                capture_method=capture_method,
            )
            self.provider_payments[provider_payment.id] = provider_payment
            return self._view(provider_payment)

        return self._with_key(key, fault, act)

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
        order: object = None,  # a provider with Stripe's semantics has it since the create
    ) -> ProviderPayment:
        key = confirm_key(record_id, attempt)
        params = {"off_session": off_session, "return_url": return_url}
        self.calls.append(
            Call(
                "confirm",
                provider_payment_id,
                key,
                {k: v for k, v in params.items() if v is not None},
            )
        )
        fault = self._fault("confirm")

        def act() -> ProviderPayment:
            provider_payment = self.provider_payments[provider_payment_id]
            if provider_payment.status == "succeeded":
                raise Permanent(
                    "already succeeded", code="payment_intent_unexpected_state", http_status=400
                )
            if provider_payment.payment_method in AUTHENTICATION_CARDS:
                if off_session:
                    provider_payment.status = "requires_payment_method"
                    provider_payment.error = PaymentError(
                        "authentication_required", "authentication_required", "Needs 3DS."
                    )
                    raise Declined(
                        "Your card was declined. This transaction requires authentication.",
                        code="authentication_required",
                        decline_code="authentication_required",
                        provider_payment_id=provider_payment_id,
                    )
                provider_payment.status = "requires_action"
                provider_payment.client_token = f"{provider_payment.id}_secret_fake"
                provider_payment.next_action = (
                    {
                        "type": "redirect_to_url",
                        "redirect_to_url": {
                            "url": f"https://hooks.example/3ds/{provider_payment.id}",
                            "return_url": return_url,
                        },
                    }
                    if return_url
                    else {"type": "use_stripe_sdk", "use_stripe_sdk": {"type": "three_d_secure"}}
                )
                return self._view(provider_payment)
            if provider_payment.payment_method in PROCESSING_CARDS:
                provider_payment.status = "processing"
                return self._view(provider_payment)
            decline = DECLINES.get(provider_payment.payment_method)
            if decline is not None:
                provider_payment.status = "requires_payment_method"
                provider_payment.error = PaymentError(
                    "card_declined", decline, "Your card was declined."
                )
                raise Declined(
                    "Your card was declined.",
                    code="card_declined",
                    decline_code=decline,
                    provider_payment_id=provider_payment_id,
                )
            self._succeed(provider_payment)
            return self._view(provider_payment)

        return self._with_key(key, fault, act)

    # -- what happens outside payorch: the customer authenticates, a method settles --------

    def authenticate(self, provider_payment_id: str, *, succeed: bool = True) -> None:
        """The customer completes (or fails) 3-D Secure."""
        provider_payment = self.provider_payments[provider_payment_id]
        assert provider_payment.status == "requires_action", provider_payment.status
        provider_payment.next_action = None
        if succeed:
            self._succeed(provider_payment)
        else:
            provider_payment.status = "requires_payment_method"
            provider_payment.error = PaymentError(
                "payment_intent_authentication_failure", None, "Authentication failed."
            )

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: object = None,
    ) -> ProviderPayment:
        """Stripe takes no forwarded result: refused, nothing done."""
        raise Permanent(
            "no forwarded authentication result (fake)", code=ACTION_RESULT_NOT_SUPPORTED
        )

    def settle(self, provider_payment_id: str) -> None:
        """A processing provider payment succeeds."""
        provider_payment = self.provider_payments[provider_payment_id]
        assert provider_payment.status == "processing", provider_payment.status
        self._succeed(provider_payment)

    def _succeed(self, provider_payment: _Intent) -> None:
        """The card pays: a charge (an authorisation under manual capture)."""
        provider_payment.charge = f"ch_fake{next(self._ids)}"
        self.charges[provider_payment.id] = self.charges.get(provider_payment.id, 0) + 1
        if provider_payment.capture_method == "manual":
            provider_payment.status = "requires_capture"
            provider_payment.amount_capturable = provider_payment.amount
        else:
            provider_payment.status = "succeeded"
            provider_payment.amount_received = provider_payment.amount

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        key = capture_key(operation_id, attempt)
        self.calls.append(
            Call("capture", provider_payment_id, key, {"amount_to_capture": amount_to_capture})
        )
        fault = self._fault("capture")

        def act() -> ProviderPayment:
            provider_payment = self.provider_payments[provider_payment_id]
            if provider_payment.status != "requires_capture":
                raise Permanent(
                    "This PaymentIntent could not be captured because it has a status of "
                    f"{provider_payment.status}.",
                    code="payment_intent_unexpected_state",
                    http_status=400,
                )
            amount = (
                provider_payment.amount_capturable
                if amount_to_capture is None
                else amount_to_capture
            )
            if amount > provider_payment.amount_capturable:
                raise Permanent(
                    "The amount to capture is greater than the amount capturable.",
                    code="amount_too_large",
                    http_status=400,
                )
            provider_payment.status = "succeeded"
            provider_payment.amount_received = amount
            provider_payment.amount_capturable = 0
            self.captures[provider_payment_id] = self.captures.get(provider_payment_id, 0) + 1
            return self._view(provider_payment)

        return self._with_key(key, fault, act)

    def cancel_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        reason: str | None,
        order: object = None,  # Stripe's semantics: the intent is canceled by its id
    ) -> ProviderPayment:
        key = cancel_key(operation_id, attempt)
        self.calls.append(Call("cancel", provider_payment_id, key, {"reason": reason}))
        fault = self._fault("cancel")

        def act() -> ProviderPayment:
            provider_payment = self.provider_payments[provider_payment_id]
            if provider_payment.status == "succeeded":
                raise Permanent(
                    "already succeeded", code="payment_intent_unexpected_state", http_status=400
                )
            provider_payment.status = "canceled"
            provider_payment.next_action = None
            provider_payment.amount_capturable = 0
            provider_payment.cancellation_reason = reason
            return self._view(provider_payment)

        return self._with_key(key, fault, act)

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: object = None,
        confirm_attempt: int = 0,
        unknown_outcomes: int = 0,
        pending: object = None,
    ) -> ProviderPayment:
        self.calls.append(Call("retrieve", provider_payment_id, None))
        self.pending_calls.append(pending)
        fault = self._fault("retrieve")
        if fault in ("unknown_before_effect", "unknown_after_effect", "saved_500_after_effect"):
            raise OutcomeUnknown("retrieve failed (fake)")
        if fault == "rate_limited":
            raise Retryable("rate limited (fake)", retry_after=self.retry_after, http_status=429)
        return self._view(self.provider_payments[provider_payment_id])

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        """Newest first (insertion order stands for creation order), like Stripe's list."""
        self.calls.append(Call("lookup", starting_after, None))
        fault = self._fault("lookup")
        if fault in ("unknown_before_effect", "unknown_after_effect", "saved_500_after_effect"):
            raise OutcomeUnknown("list failed (fake)")
        if fault == "rate_limited":
            raise Retryable("rate limited (fake)", retry_after=self.retry_after, http_status=429)
        newest_first = [
            i
            for i in reversed(self.provider_payments.values())
            if created_gte <= i.created <= created_lte
        ]
        if starting_after is not None:
            ids = [i.id for i in newest_first]
            newest_first = newest_first[ids.index(starting_after) + 1 :]
        page = newest_first[:limit]
        return ProviderPaymentPage(
            provider_payments=tuple(self._view(i) for i in page),
            has_more=len(newest_first) > len(page),
        )

    # -- refunds ----------------------------------------------------------------------------

    def refunded(self, provider_payment_id: str) -> int:
        """What the provider payment's refunds that did not fail returned (Stripe's
        amount_refunded)."""
        return sum(
            r.amount
            for r in self.refunds.values()
            if r.provider_payment_id == provider_payment_id
            and r.status not in ("failed", "canceled")
        )

    def refunds_of(self, operation_id: str) -> list[ProviderRefund]:
        return [
            r for r in self.refunds.values() if r.metadata.get("payorch_refund_id") == operation_id
        ]

    def create_refund(
        self,
        *,
        provider_payment_id: str,
        operation_id: str,
        attempt: int,
        amount: int,
        reason: str | None,
        metadata: dict[str, str],
    ) -> ProviderRefund:
        key = refund_key(operation_id, attempt)
        self.calls.append(Call("refund", provider_payment_id, key))
        fault = self._fault("refund")

        def act() -> ProviderRefund:
            provider_payment = self.provider_payments[provider_payment_id]
            if provider_payment.status != "succeeded":
                raise Permanent(
                    f"This PaymentIntent ({provider_payment_id}) does not have a successful "
                    "charge to refund.",
                    code="charge_not_refundable",
                    http_status=400,
                )
            if self.refunded(provider_payment_id) + amount > provider_payment.amount_received:
                raise Permanent(
                    f"Refund amount (${amount / 100:.2f}) is greater than unrefunded amount "
                    "on charge.",
                    code="amount_too_large",
                    http_status=400,
                )
            refund = ProviderRefund(
                id=f"re_fake{next(self._ids)}",
                provider_payment_id=provider_payment_id,
                amount=amount,
                currency=provider_payment.currency,
                status="succeeded",
                metadata=dict(metadata),
                reason=reason,
                created=int(time.time()),
            )
            self.refunds[refund.id] = refund
            return refund

        return self._with_key(key, fault, act)  # type: ignore[return-value]

    def retrieve_refund(self, refund_id: str, *, pending: object = None) -> ProviderRefund:
        self.calls.append(Call("retrieve_refund", refund_id, None))
        self.pending_calls.append(pending)
        fault = self._fault("retrieve_refund")
        if fault in ("unknown_before_effect", "unknown_after_effect", "saved_500_after_effect"):
            raise OutcomeUnknown("retrieve refund failed (fake)")
        return self.refunds[refund_id]

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        """Newest first, like Stripe's list."""
        self.calls.append(Call("list_refunds", provider_payment_id, None))
        fault = self._fault("list_refunds")
        if fault in ("unknown_before_effect", "unknown_after_effect", "saved_500_after_effect"):
            raise OutcomeUnknown("list refunds failed (fake)")
        if fault == "rate_limited":
            raise Retryable("rate limited (fake)", retry_after=self.retry_after, http_status=429)
        newest_first = [
            r
            for r in reversed(self.refunds.values())
            if r.provider_payment_id == provider_payment_id
        ]
        if starting_after is not None:
            ids = [r.id for r in newest_first]
            newest_first = newest_first[ids.index(starting_after) + 1 :]
        page = newest_first[:limit]
        return RefundPage(refunds=tuple(page), has_more=len(newest_first) > len(page))
