"""The simulator's records: what it knows about intents, payment methods and money.

PaymentIntent statuses it models::

    create (no payment_method) ──> requires_payment_method
    create (payment_method)    ──> requires_confirmation
    confirm, card succeeds     ──> succeeded              one charge = ONE money movement
    confirm, card declines     ──> requires_payment_method (last_payment_error, failed charge)
    confirm when succeeded     ──> 400 payment_intent_unexpected_state (nothing moves)

``requires_action`` (3-D Secure), manual capture and cancellation are not simulated; the
requests that would need them are refused with a 400 that says so.
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
    latest_charge: str | None = None
    last_payment_error: dict[str, Any] | None = None


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
class IntentVersions:
    """What search can see: past versions of an intent with the time each was written."""

    versions: list[tuple[float, Intent]] = field(default_factory=list)
