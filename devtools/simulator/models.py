"""The simulator's records: what it knows about intents, charges, refunds and money.

PaymentIntent statuses it models::

    create (no payment_method) ──> requires_payment_method
    create (payment_method)    ──> requires_confirmation
    confirm, card succeeds     ──> succeeded              one charge = ONE money movement
        capture_method=manual  ──> requires_capture       the charge is an authorisation
    capture (requires_capture) ──> succeeded              amount_to_capture <= amount_capturable;
                                                          one capture = ONE capture movement
    confirm, card declines     ──> requires_payment_method (last_payment_error, failed charge)
    confirm, 3-D Secure card   ──> requires_action         (next_action, client_secret)
        off_session=true       ──> 402 authentication_required, requires_payment_method
      /_sim authenticate ok    ──> as a confirm of a card without 3-D Secure
      /_sim authenticate fail  ──> requires_payment_method (payment_intent_authentication_failure)
    confirm, asynchronous card ──> processing ── /_sim settle or a delay ──> succeeded | failed
    confirm when succeeded     ──> 400 payment_intent_unexpected_state (nothing moves)
    cancel (not succeeded, not
      canceled)                ──> canceled               an authorisation is released
    capture / cancel elsewhere ──> 400 payment_intent_unexpected_state
    capture above amount_capturable ──> 400 amount_too_large (still requires_capture)
    capture under the minimum  ──> 400 amount_too_small (still requires_capture)

A refund (``POST /v1/refunds``) takes money back from a succeeded intent's charge: the sum of
refunds that are not failed or canceled never exceeds what was captured (400 otherwise, with
Stripe's wording).  Card refunds succeed at once, except for the refund test cards
(``cards.RefundBehaviour``), whose refunds settle later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devtools.simulator.cards import SimCard


@dataclass
class PaymentMethod:
    id: str
    token: str
    card: SimCard
    created: int


@dataclass
class Intent:
    id: str
    seq: int
    created: int
    amount: int
    currency: str
    client_secret: str
    status: str
    metadata: dict[str, str]
    payment_method_types: list[str]
    automatic_payment_methods: dict[str, Any] | None
    description: str | None = None
    payment_method: str | None = None
    capture_method: str = "automatic"
    confirmation_method: str = "automatic"
    receipt_email: str | None = None
    statement_descriptor: str | None = None
    statement_descriptor_suffix: str | None = None
    amount_received: int = 0
    amount_capturable: int = 0
    latest_charge: str | None = None
    last_payment_error: dict[str, Any] | None = None
    customer: str | None = None
    canceled_at: int | None = None
    cancellation_reason: str | None = None
    # While requires_action: what the customer must do (Stripe's next_action).
    next_action: dict[str, Any] | None = None
    # Set by a confirm that asked for authentication: was it off-session, and where to return.
    off_session: bool = False


@dataclass
class Charge:
    """A successful charge (or, under manual capture, an authorisation until captured)."""

    id: str
    intent_id: str
    record_id: str | None
    amount: int
    currency: str
    created: int
    payment_method: str
    captured: bool
    amount_captured: int = 0
    # Sum of refunds that are not failed or canceled.
    amount_refunded: int = 0
    # An uncaptured authorisation released by a cancel.
    released: bool = False
    disputed: bool = False

    @property
    def refundable(self) -> int:
        return self.amount_captured - self.amount_refunded


@dataclass
class Refund:
    id: str
    seq: int
    charge_id: str
    intent_id: str
    amount: int
    currency: str
    created: int
    # pending | requires_action | succeeded | failed | canceled
    status: str
    metadata: dict[str, str]
    reason: str | None = None
    failure_reason: str | None = None
    # Where the refund came from: ``api`` (POST /v1/refunds) or ``dashboard`` (/_sim).
    origin: str = "api"


@dataclass(frozen=True)
class Movement:
    """Money that moved: one successful charge."""

    seq: int
    at: float
    charge_id: str
    intent_id: str
    record_id: str | None
    amount: int
    currency: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "charge": self.charge_id,
            "payment_intent": self.intent_id,
            "record_id": self.record_id,
            "amount": self.amount,
            "currency": self.currency,
        }


@dataclass(frozen=True)
class Decline:
    """A failed charge: no money moved."""

    seq: int
    at: float
    charge_id: str
    intent_id: str
    record_id: str | None
    amount: int
    currency: str
    code: str
    decline_code: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "charge": self.charge_id,
            "payment_intent": self.intent_id,
            "record_id": self.record_id,
            "amount": self.amount,
            "currency": self.currency,
            "code": self.code,
            "decline_code": self.decline_code,
        }


@dataclass
class Dispute:
    id: str
    charge_id: str
    intent_id: str
    amount: int
    currency: str
    created: int
    reason: str
    status: str = "needs_response"


@dataclass(frozen=True)
class Capture:
    """Money that moved when an authorisation was captured."""

    seq: int
    at: float
    charge_id: str
    intent_id: str
    record_id: str | None
    amount: int
    currency: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "charge": self.charge_id,
            "payment_intent": self.intent_id,
            "record_id": self.record_id,
            "amount": self.amount,
            "currency": self.currency,
        }


@dataclass
class IntentVersions:
    """What search can see: past versions of an intent with the time each was written."""

    versions: list[tuple[float, Intent]] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """The answer of an executed request, before it is encoded."""

    status: int
    body: dict[str, Any]
    intent_id: str | None
    record_id: str | None
