"""The provider protocol and our error taxonomy.

Everything the workers need from a provider: provider payments (create, confirm, retrieve, list,
capture, cancel, and the customer's authentication result forwarded where the provider takes
one) and refunds (create, retrieve, list).  Each call either returns its object
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
    # Whose problem the failure is, as ``Declined.kind``: "card" (the card or the shopper)
    # or "provider" (processing failed, nothing charged: another provider may succeed);
    # None when the adapter does not say.
    kind: str | None = None


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
    # Only on a read that resolved a ``PendingCall``: the provider refused that call after
    # accepting it (an asynchronous failure), so the call failed and the payment stands as
    # the rest of this object says.  A provider whose calls answer synchronously never sets it.
    refused_call: RefusedCall | None = None
    # Only while ``processing``: what the provider's answer waits for, in words, for the
    # operator (the record's wait reason).
    awaiting: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class PendingCall:
    """A call of ours whose outcome the engine is resolving by a read (it was sent, under
    the key ``payorch-{operation_id}-{step}-{attempt}``, and its answer was lost or said
    "accepted, outcome later").

    A provider whose reads are strongly consistent (Stripe) ignores it.  A provider whose
    calls are asynchronous (Adyen: ``received``, the outcome by notification) must never
    read "the call is still owed" while this call may still be in flight: it answers
    ``processing`` until it knows the call's outcome, and it may replay the call under the
    same key to learn it (or to make it happen once)."""

    step: str  # capture, cancel, refund
    operation_id: str
    attempt: int
    amount: int | None
    # The provider payment the call was made on (a refund's read is by the refund's id).
    provider_payment_id: str


@dataclass(frozen=True)
class RefusedCall:
    """The provider refused a ``PendingCall`` after accepting it, with its reason."""

    operation_id: str
    code: str
    message: str


@dataclass(frozen=True)
class RecordedPayment:
    """Our payment as payorch recorded it, for a provider whose modification requests must
    repeat what the payment was (Adyen's ``amount.currency``) and whose answers do not say
    which of our payments they are about."""

    record_id: str
    amount: int
    currency: str
    capture_method: str


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
    # Which attempt of the payment's route this is (1: the first account; decision 0086):
    # every key forwarded for it is derived from it (``keys``), so the next account's
    # idempotency is independent of the last one's.
    route_attempt: int = 1


@dataclass(frozen=True)
class ActionResult:
    """What the customer's authentication produced, as the merchant's front end sent it to
    ``POST /v1/payments/{id}/details`` (Adyen's ``{"details": {...}, "paymentData"?}``), and
    the number ``n`` of its forward (key ``payorch-{record_id}-details-{n}``, taken when the
    merchant's request was committed).  Opaque to the engine: only an adapter whose provider
    takes a forwarded result (``accepts_action_result``) reads it."""

    body: dict[str, Any] = field(repr=False)
    attempt: int


@dataclass(frozen=True)
class ProviderPaymentPage:
    provider_payments: tuple[ProviderPayment, ...]
    has_more: bool
    # Where the next page starts, when the source has its own position (a report read a
    # row at a time); None: after the page's last object (``starting_after`` its id).
    cursor: str | None = None


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
    # The provider's own words on the failure, when it gives some (Adyen's ``reason``).
    failure_message: str | None = None
    created: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class RefundPage:
    refunds: tuple[ProviderRefund, ...]
    has_more: bool
    # As ``ProviderPaymentPage.cursor``.
    cursor: str | None = None


@dataclass(frozen=True)
class BalanceMovement:
    """Money that moved in the account's balance (Stripe's balance transaction): what the
    provider's books say arrived or left for one payment or refund, in the balance's
    currency (which may differ from the payment's: the provider converted it)."""

    id: str
    # payment: money in for a payment (a charge); refund: money out for a refund;
    # refund_reversal: a failed refund's money back; other: anything else (fees, payouts,
    # dispute adjustments), not compared.
    kind: str
    # Signed, in the minor units of ``currency``: + into the balance, - out of it.
    amount: int
    currency: str
    # The provider object it moved for: a provider payment's charge (``ProviderPayment.
    # latest_charge``) or a provider refund's id; None when the provider names none.
    source: str | None
    created: int
    # Our id on the source object (a payment id on a charge, a refund id on a refund), as
    # the provider payment's and refund's metadata carry it; None: the source names none.
    reference: str | None = None
    # For a refund: the charge it refunds (how a refund without our id is known as ours).
    refunded_charge: str | None = None


@dataclass(frozen=True)
class BalanceMovementPage:
    movements: tuple[BalanceMovement, ...]
    has_more: bool
    # As ``ProviderPaymentPage.cursor``.
    cursor: str | None = None


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


class ProviderEventLog(Protocol):
    """The provider's events payorch stored (verified webhooks and notifications), read back.

    A provider with no read API for part of a payment's state speaks only through its events:
    Adyen's modifications answer ``received``, and whether a capture, cancel or refund then
    happened only ever arrives as a notification.  Its adapter reads what was stored here, as
    the provider's own word (nothing is stored unless its signature verified).  Events stored
    once each; a provider's duplicates are one row."""

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The raw payloads of the provider's stored events about our payment ``record_id``
        or about the payment that carries ``provider_payment_id`` (either, when both are
        given), in the order they were received."""
        ...

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        """Our payment that carries ``provider_payment_id``, as payorch recorded it (None:
        no payment of this provider carries it)."""
        ...


class NoEventLog:
    """A ``ProviderEventLog`` that has stored nothing (a provider built outside a container)."""

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        return []

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        return None


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
# The provider of the platform's own account (design.md, "Connector accounts": the
# platform's key is its implicit account at this provider): what a failover to the route
# entry ``platform`` names as the payment's provider.
PLATFORM_PROVIDER = "stripe"
# A ``Permanent`` code: the provider takes no forwarded authentication result.
ACTION_RESULT_NOT_SUPPORTED = "action_result_not_supported"


def accepts_action_result(provider: object) -> bool:
    """Whether the provider takes the customer's authentication result from us
    (``PaymentProvider.accepts_action_result``).  False for one that does not say: a provider
    whose customer authenticates with it directly (Stripe), and test doubles written before
    the capability existed."""
    return bool(getattr(provider, "accepts_action_result", False))


def optional(**values: tuple[Any, Any]) -> dict[str, Any]:
    """The keyword arguments whose value differs from its default (``name=(value, default)``).

    The wrappers forward the optional create/confirm arguments only when the caller set them:
    for a conforming provider that is the same call, and a provider written before the
    argument existed (a test double, a tool in ``devtools``) keeps working unchanged.
    """
    return {name: value for name, (value, default) in values.items() if value != default}


class PaymentProvider(Protocol):
    """What the workers need from a provider.  Implementations must not retry: retries
    are the worker's, at one layer.  Every write carries the derived key named here.

    ``accepts_action_result`` (a class attribute, read through ``accepts_action_result()``;
    False when absent): whether a ``requires_action`` payment completes by forwarding the
    customer's authentication result through us (``submit_action_result``; Adyen's
    ``/payments/details``), or the customer finishes with the provider directly (Stripe's
    ``client_secret`` flow) and we only read the outcome."""

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
        route_attempt: int = 1,
    ) -> ProviderPayment:
        """Create an unconfirmed provider payment (``confirm=false``, moves no money) with the key
        ``payorch-{record_id}-create`` (``keys.create_key``: attempt ``route_attempt`` of the
        payment's route) and ``metadata[payorch_record_id] = record_id``.
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
        unknown_outcomes: int = 0,
        pending: PendingCall | None = None,
        action_result: ActionResult | None = None,
    ) -> ProviderPayment:
        """Strongly consistent read of the provider payment.  A provider with no read API
        replays confirm ``confirm_attempt`` of ``order`` under its key instead (0: none was
        taken, so the payment is still unconfirmed).

        ``unknown_outcomes``: how many of this payment's provider calls so far ended with
        their outcome unknown (the record's count; it only grows).  A provider with a
        strongly consistent read ignores it.  One whose read is a replay may use it to stop
        replaying and resolve the outcome another way (Adyen: a technical cancel, then its
        notification); such a read either returns the payment or raises ``OutcomeUnknown``
        while the answer is still on its way, never a payment it has not proven.

        ``pending``: the capture or cancel of ours this read resolves; while its outcome is
        not known the read answers ``processing`` (never the state that would make the
        engine send the call again), and a call the provider refused after accepting it is
        named in ``refused_call``.

        ``action_result``: the last customer's result forwarded and answered; a provider
        with no read API then replays that forward under its key (the latest answer about
        the payment) instead of the confirm."""

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """Forward the customer's authentication result of a ``requires_action`` payment with
        the key ``payorch-{record_id}-details-{action_result.attempt}``; answers the payment
        as a confirm does (settled, declined, or ``requires_action`` again).  An unknown
        outcome is resolved by sending the same result under the same key again (the
        provider answers its stored result).  A provider that does not take one
        (``accepts_action_result`` False) raises ``Permanent(code=
        "action_result_not_supported")`` without sending anything."""

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
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        reason: str | None,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """Cancel with the key ``payorch-{operation_id}-cancel-{attempt}``
        (``cancellation_reason``: duplicate, fraudulent, requested_by_customer, abandoned).
        Canceling a succeeded provider payment is
        ``Permanent(code="payment_intent_unexpected_state")``.  ``order``: the payment's
        order, given by the charge (an abandoned authentication), for a provider that
        answers a payment it never authorised without a request (Adyen)."""

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

    def retrieve_refund(
        self, refund_id: str, *, pending: PendingCall | None = None
    ) -> ProviderRefund:
        """Strongly consistent read of one refund.  ``pending``: the refund create of ours
        this read resolves (its amount and provider payment), for a provider that reads a
        refund's outcome from its notifications and may replay the create under its key."""

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        """One page of the provider payment's refunds, newest first (strongly consistent): how an
        unknown refund outcome is resolved before anything is re-sent."""


class ReconciliationSource(Protocol):
    """What reconciliation reads from a provider account (decision 0093): its payments and
    refunds created in a window, a page at a time (newest first, after ``starting_after``:
    the cursor a run stores and resumes from), and one object by id, to prove an absence.
    Strongly consistent reads only.  The Stripe adapter lists its API (balance
    transactions included, decision 0108); an Adyen account's
    source is its settlement details reports (``adyen_settlement_source``, decision 0106).
    A page's ``cursor``, when set, is what the next call gets as ``starting_after``.

    A missing object raises ``Permanent`` with ``code == OBJECT_MISSING``; a source that
    cannot prove an absence (a report lists only what was paid out) raises it with
    ``OBJECT_UNPROVEN`` instead, and the object counts as in flight; anything else
    raises as the rest of the protocol does (``OutcomeUnknown``: the provider could not be
    read, the run stops where it was and resumes from its cursor)."""

    name: str

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage: ...

    def list_refunds_created(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> RefundPage: ...

    def list_balance_movements(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> BalanceMovementPage:
        """The account's balance movements created in the window (decision 0108), a page at
        a time like the lists above.  A source whose provider has no balance to read, or
        whose payments and refunds already are its settled money (a settlement report),
        answers one empty page."""
        ...

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment: ...

    def retrieve_refund(self, refund_id: str) -> ProviderRefund: ...

    def close(self) -> None:
        """Release its connections (a source is built per run)."""


# The code of ``Permanent`` when an object read by id does not exist (Stripe's own).
OBJECT_MISSING = "resource_missing"
# The code of ``Permanent`` when a source cannot say whether an object exists (ours).
OBJECT_UNPROVEN = "object_unproven"
