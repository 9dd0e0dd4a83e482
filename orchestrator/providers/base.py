"""The provider protocol and our error taxonomy.

Everything the workers need from a provider: provider payments (create, confirm, retrieve, list,
capture, cancel) and refunds (create, retrieve, list).  Each call either returns its object
(``ProviderPayment``, ``ProviderPaymentPage``, ``ProviderRefund``, ``RefundPage``) or raises one
of::

    ProviderError
    ├── Declined          the provider refused the payment (card errors): a final outcome,
    │                     carries code and decline_code
    ├── Permanent         our request is wrong (invalid request, authentication): retrying
    │                     the same request cannot help; the payment fails
    ├── Retryable         known not to have acted (429 rate limit, 409 idempotency key in
    │                     use): wait ``retry_after`` (if the provider said) and try again
    └── OutcomeUnknown    timeout, connection error, 5xx: the provider MAY have acted.
                          Never resend blindly: query first.

Idempotency keys are derived from our record or operation id (``keys``), never random, so a
resend of the same step after a crash is the same request to the provider.

Provider events (webhooks) come in the other direction: ``ProviderEvent`` is what a verified
webhook says, and ``WebhookSignatureInvalid`` what a forged, stale or garbled one raises
(``stripe_objects.parse_webhook_event``).  An event is a hint, never the truth: the object it
names is retrieved before anything is applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class PaymentError:
    """The provider's last payment error on a provider payment (Stripe's ``last_payment_error``)."""

    code: str | None
    decline_code: str | None
    message: str | None
    # The payment method the failed attempt used (Stripe detaches it from a declined provider
    # payment and names it here instead).
    payment_method: str | None = None


@dataclass(frozen=True)
class ProviderPayment:
    id: str
    # Stripe's provider payment statuses: requires_payment_method, requires_confirmation,
    # requires_action, processing, requires_capture, canceled, succeeded.
    status: str
    amount: int
    currency: str
    metadata: dict[str, str]
    latest_charge: str | None = None
    last_payment_error: PaymentError | None = None
    created: int | None = None
    # What the provider payment would charge, or charged: compared with the record before any
    # provider payment is adopted, confirmed or settled (``engine.kinds.payment_match``).
    payment_method: str | None = None
    customer: str | None = None
    capture_method: str = "automatic"
    # Money the provider actually received (a succeeded provider payment): what the ledger books.
    amount_received: int | None = None
    # What a capture may still take (``requires_capture`` under manual capture), else 0.
    amount_capturable: int = 0
    # Only while ``requires_action``: what the customer must do (Stripe's ``next_action``:
    # ``{"type": "redirect_to_url", "redirect_to_url": {"url", "return_url"}}`` or
    # ``{"type": "use_stripe_sdk", ...}``).
    next_action: dict[str, Any] | None = None
    # Opaque (Stripe's client_secret, passed to the payment JSON as ``client_secret``): the
    # merchant's front end needs it to finish authentication; it lets anyone holding it
    # confirm the provider payment from a browser, so it stays out of reprs (logs, tracebacks).
    client_token: str | None = field(default=None, repr=False)
    # Set once canceled: abandoned, automatic, duplicate, failed_invoice, fraudulent,
    # requested_by_customer, void_invoice.
    cancellation_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PaymentOrder:
    """What the merchant asked for, as every step of a charge may need to send it.

    A provider with an unconfirmed payment object (Stripe) sends it once, at create; a
    provider whose one request both creates and authorises (Adyen) sends it with the
    confirm, and, having no read API, answers a retrieve by replaying that request under
    the same key.  So the engine passes it to both, and each adapter takes what it needs.
    """

    record_id: str
    amount: int
    currency: str
    # A provider's own method: a string id (``pm_…``) or a provider's object (Adyen's
    # ``paymentMethod``).
    payment_method: str | dict[str, Any]
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    capture_method: str = "automatic"
    customer: str | None = None
    off_session: bool | None = None
    return_url: str | None = None


@dataclass(frozen=True)
class ProviderPaymentPage:
    provider_payments: tuple[ProviderPayment, ...]
    has_more: bool


@dataclass(frozen=True)
class ProviderRefund:
    id: str
    provider_payment_id: str
    amount: int
    currency: str
    # Stripe's refund statuses: pending, requires_action, succeeded, failed, canceled.
    status: str
    metadata: dict[str, str]
    reason: str | None = None
    # Why a refund failed (Stripe: lost_or_stolen_card, expired_or_canceled_card, unknown, …).
    failure_reason: str | None = None
    created: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class RefundPage:
    refunds: tuple[ProviderRefund, ...]
    has_more: bool


@dataclass(frozen=True)
class DisputeFacts:
    """A dispute as the provider's event reports it (the protocol has no dispute read: the
    event is the only source, ``services.disputes``)."""

    amount: int
    currency: str
    reason: str | None
    status: str  # needs_response, under_review, won, lost, … (the provider's word)


@dataclass(frozen=True)
class ProviderEvent:
    """What a verified provider webhook says: a hint about one object, never its state."""

    id: str
    type: str  # e.g. payment_intent.succeeded, charge.refunded, charge.dispute.created
    created: int
    object_id: str  # the id of ``data.object`` (pi_…, ch_…, re_…, dp_…)
    object_type: str  # its ``object`` field: payment_intent, charge, refund, dispute, …
    # The provider payment the object belongs to (the object itself for payment_intent.*),
    # or None when the event names none (an unrelated type).
    provider_payment_id: str | None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Set when the event is about a dispute (the object is the dispute).
    dispute: DisputeFacts | None = None
    # Our payment's id when the provider carries it back (Adyen's ``merchantReference``):
    # how an event finds a payment whose provider id is not known yet.
    record_id: str | None = None


class WebhookSignatureInvalid(Exception):
    """A webhook whose signature is missing, wrong, or older than the tolerance, or whose
    body is not an event: answer 400 and store nothing."""


class ProviderError(Exception):
    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status


class Declined(ProviderError):
    def __init__(
        self,
        message: str,
        *,
        code: str,
        decline_code: str | None = None,
        provider_payment_id: str | None = None,
        http_status: int | None = 402,
        kind: str | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.code = code
        self.decline_code = decline_code
        self.provider_payment_id = provider_payment_id
        # Whose problem the decline is, from the adapter's decline table: "card" (the card
        # or shopper; another provider would see the same card) or "provider" (processing
        # failed, nothing charged); None when the adapter does not say.
        self.kind = kind


class Permanent(ProviderError):
    def __init__(
        self, message: str, *, code: str | None = None, http_status: int | None = None
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.code = code


class Retryable(ProviderError):
    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        code: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after
        self.code = code


class OutcomeUnknown(ProviderError):
    pass


# -- the protocol's vocabulary -----------------------------------------------------------
# Statuses, codes and event types are Stripe's, adopted as the protocol's own: the Stripe
# adapter passes them through, another provider's adapter maps its own answers to them.  The
# engine names them only through these constants.

# A ``Permanent`` code: the call does not fit the payment's state at the provider (a confirm
# of a payment that moved on, a capture of a non-capturable one, a cancel after success).
# The engine answers it by reading the payment, never by resending.
UNEXPECTED_STATE = "payment_intent_unexpected_state"
# The event type that says a payment's authorisation was canceled at the provider (Stripe
# expires one left uncaptured for 7 days): a hint to read the payment.
PAYMENT_CANCELED_EVENT = "payment_intent.canceled"
# A test payment method token (``pm_card_visa``…): each use becomes a new payment method
# with its own id, so only its presence can be compared with the record.
TEST_PAYMENT_METHOD_PREFIX = "pm_card_"


def optional(**values: tuple[Any, Any]) -> dict[str, Any]:
    """The keyword arguments whose value differs from its default (``name=(value, default)``).

    The wrappers forward the optional create/confirm arguments only when the caller set them:
    for a conforming provider that is the same call, and a provider written before the
    argument existed (a test double, a tool in ``devtools``) keeps working unchanged.
    """
    return {name: value for name, (value, default) in values.items() if value != default}


class PaymentProvider(Protocol):
    """What the workers need from a provider.  Implementations must not retry: retries
    are the worker's, at one layer.  Every write carries the derived key named here."""

    name: str

    def create_payment(
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
        capture_method: str = "automatic",
        customer: str | None = None,
    ) -> ProviderPayment:
        """Create an unconfirmed provider payment (``confirm=false``, moves no money) with the key
        ``payorch-{record_id}-create`` and ``metadata[payorch_record_id] = record_id``.
        ``capture_method="manual"`` makes a successful confirm stop at ``requires_capture``;
        ``customer`` (``cus_…``) lets a saved card be used."""

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """Confirm with the key ``payorch-{record_id}-confirm-{attempt}``.  ``off_session``:
        the customer is not present, so a card that needs authentication declines
        (``authentication_required``) instead of answering ``requires_action``;
        ``return_url``: where a redirect-based authentication sends the customer back;
        ``order``: the whole order, for a provider whose confirm is the authorisation."""

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: PaymentOrder | None = None,
        confirm_attempt: int = 0,
    ) -> ProviderPayment:
        """Strongly consistent read of the provider payment.  A provider with no read API
        replays confirm ``confirm_attempt`` of ``order`` under its key instead (0: none was
        taken, so the payment is still unconfirmed)."""

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        """One page of the provider payments created in ``[created_gte, created_lte]`` (provider
        timestamps, seconds), newest first, after ``starting_after``.  Listing is strongly
        consistent; the provider's search is not and is never used to prove absence."""

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        """Capture a ``requires_capture`` provider payment (all of ``amount_capturable`` when
        ``amount_to_capture`` is None; the rest is released) with the key
        ``payorch-{operation_id}-capture-{attempt}``.  A non-capturable provider payment is
        ``Permanent(code="payment_intent_unexpected_state")``."""

    def cancel_payment(
        self, provider_payment_id: str, *, operation_id: str, attempt: int, reason: str | None
    ) -> ProviderPayment:
        """Cancel with the key ``payorch-{operation_id}-cancel-{attempt}``
        (``cancellation_reason``: duplicate, fraudulent, requested_by_customer, abandoned).
        Canceling a succeeded provider payment is
        ``Permanent(code="payment_intent_unexpected_state")``."""

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
        """Refund ``amount`` of the provider payment's charge with the key
        ``payorch-{operation_id}-refund-{attempt}`` and
        ``metadata[payorch_refund_id] = operation_id`` (how a lookup after an unknown outcome
        recognises it).  More than is left is ``Permanent(code="charge_exceeds_source_limit"
        or "amount_too_large")``; a refunded-in-full charge ``charge_already_refunded``."""

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        """Strongly consistent read of one refund."""

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        """One page of the provider payment's refunds, newest first (strongly consistent): how an
        unknown refund outcome is resolved before anything is re-sent."""
