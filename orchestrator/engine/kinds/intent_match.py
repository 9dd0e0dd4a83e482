"""Is this provider intent ours?  (pure)

The charge's check, beside it in the engine rather than in the domain: it reads the
provider's intent (``providers.base``), and the domain knows no provider.

The hazard: an intent that carries our record id in its metadata is not necessarily the one
we asked for.  Another integration on the same Stripe account, a manual action in the
Dashboard or a bug elsewhere can create an intent with our ``payorch_record_id`` and another
amount.  Adopting it and confirming it charges the customer the wrong amount while our
ledger books the amount we asked for.  So every intent we read (the create's answer, a
confirm's answer, a retrieve after a timeout, each candidate of the lookup) is compared with
the record before we adopt, confirm or settle it; any difference stops the payment.

What must match, field by field::

    metadata.payorch_record_id   our record id
    amount, currency             the record's (currency compared lower-case)
    customer                     the record's (null when the payment names none)
    capture_method               the record's: automatic ("automatic_async" is Stripe's newer
                                 name for the same thing: capture as soon as the charge
                                 succeeds) or manual (authorise only)
    payment method               the record's id; a Stripe *test* token (``pm_card_visa``…)
                                 becomes a fresh ``pm_…`` on every use, so for those only the
                                 presence of a payment method can be checked
    amount_received (succeeded)  the record's amount: what the provider moved is what the
                                 ledger books
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.model import PaymentRecord
from orchestrator.providers.base import ProviderIntent
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

# Stripe's test payment method tokens: each use creates a new PaymentMethod with its own id.
TEST_TOKEN_PREFIX = "pm_card_"  # noqa: S105 - a public Stripe prefix, not a secret
_AUTOMATIC_CAPTURE = frozenset({"automatic", "automatic_async"})


@dataclass(frozen=True)
class ExpectedIntent:
    """What our record asked the provider for."""

    record_id: str
    amount: int
    currency: str
    payment_method: str
    customer: str | None = None
    capture_method: str = "automatic"

    @classmethod
    def for_record(cls, record: PaymentRecord) -> ExpectedIntent:
        return cls(
            record_id=record.id,
            amount=record.request.amount,
            currency=record.request.currency.lower(),
            payment_method=record.request.payment_method,
            customer=record.request.customer,
            capture_method=record.request.capture_method,
        )


def _payment_method_of(intent: ProviderIntent) -> str | None:
    if intent.payment_method:
        return intent.payment_method
    # A declined intent has its payment method detached; the failed attempt names it.
    error = intent.last_payment_error
    return error.payment_method if error is not None else None


def _same_capture(actual: str, expected: str) -> bool:
    if expected in _AUTOMATIC_CAPTURE:
        return actual in _AUTOMATIC_CAPTURE
    return actual == expected


def intent_mismatches(intent: ProviderIntent, expected: ExpectedIntent) -> tuple[str, ...]:
    """Every way ``intent`` differs from what the record asked for; empty means it is ours."""
    problems: list[str] = []
    named = intent.metadata.get(RECORD_ID_METADATA_KEY)
    if named != expected.record_id:
        problems.append(f"metadata.{RECORD_ID_METADATA_KEY} {named!r} != {expected.record_id!r}")
    if intent.amount != expected.amount:
        problems.append(f"amount {intent.amount} != {expected.amount}")
    if intent.currency.lower() != expected.currency:
        problems.append(f"currency {intent.currency!r} != {expected.currency!r}")
    if intent.customer != expected.customer:
        problems.append(f"customer {intent.customer!r} != {expected.customer!r}")
    if not _same_capture(intent.capture_method, expected.capture_method):
        problems.append(f"capture_method {intent.capture_method!r} != {expected.capture_method!r}")
    method = _payment_method_of(intent)
    if method is None:
        problems.append("no payment method")
    elif method != expected.payment_method and not expected.payment_method.startswith(
        TEST_TOKEN_PREFIX
    ):
        problems.append(f"payment_method {method!r} != {expected.payment_method!r}")
    if (
        intent.status == "succeeded"
        and intent.amount_received is not None
        and intent.amount_received != expected.amount
    ):
        problems.append(f"amount_received {intent.amount_received} != {expected.amount}")
    return tuple(problems)


@dataclass(frozen=True)
class RejectedIntent:
    """A candidate that named our record but is not ours: kept on the payment for ops."""

    id: str
    status: str
    amount: int
    currency: str
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "status": self.status,
            "amount": self.amount,
            "currency": self.currency,
            "reasons": list(self.reasons),
        }

    def describe(self) -> str:
        return f"{self.id} ({self.status}): {'; '.join(self.reasons)}"


def reject(intent: ProviderIntent, reasons: tuple[str, ...]) -> RejectedIntent:
    return RejectedIntent(
        id=intent.id,
        status=intent.status,
        amount=intent.amount,
        currency=intent.currency,
        reasons=reasons,
    )
