"""Is this provider payment ours?  (pure)

The charge's check, beside it in the engine rather than in the domain: it reads the
provider's payment (``providers.base``), and the domain knows no provider.

The hazard: a provider payment that carries our record id in its metadata is not necessarily the one
we asked for.  Another integration on the same provider account, a manual action in the
Dashboard or a bug elsewhere can create a provider payment with our ``payorch_record_id`` and
another amount.  Adopting it and confirming it charges the customer the wrong amount while our
ledger books the amount we asked for.  So every provider payment we read (the create's answer, a
confirm's answer, a retrieve after a timeout, each candidate of the lookup) is compared with
the record before we adopt, confirm or settle it; any difference stops the payment.

What must match, field by field::

    metadata.payorch_record_id   our record id
    amount, currency             the record's (currency compared lower-case)
    customer                     the record's (null when the payment names none)
    capture_method               the record's: automatic ("automatic_async" is the provider's
                                 newer name for the same thing: capture as soon as the charge
                                 succeeds) or manual (authorise only)
    payment method               the record's id; a *test* token (``pm_card_visa``…)
                                 becomes a fresh ``pm_…`` on every use, so for those only the
                                 presence of a payment method can be checked
    amount_received (succeeded)  the record's amount: what the provider moved is what the
                                 ledger books
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.model import PaymentRecord
from orchestrator.providers.base import TEST_PAYMENT_METHOD_PREFIX, ProviderPayment
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY

_AUTOMATIC_CAPTURE = frozenset({"automatic", "automatic_async"})


@dataclass(frozen=True)
class ExpectedPayment:
    """What our record asked the provider for."""

    record_id: str
    amount: int
    currency: str
    # None: the method was a provider's object (``payment_methods``), which a provider
    # payment does not name by an id: there is nothing to compare it with.
    payment_method: str | None
    customer: str | None = None
    capture_method: str = "automatic"

    @classmethod
    def for_record(cls, record: PaymentRecord) -> ExpectedPayment:
        return cls(
            record_id=record.id,
            amount=record.request.amount,
            currency=record.request.currency.lower(),
            payment_method=_method_id(record),
            customer=record.request.customer,
            capture_method=record.request.capture_method,
        )


def _method_id(record: PaymentRecord) -> str | None:
    method = record.payment_method_for_account
    return method if isinstance(method, str) else None


def _payment_method_of(provider_payment: ProviderPayment) -> str | None:
    if provider_payment.payment_method:
        return provider_payment.payment_method
    # A declined provider payment has its payment method detached; the failed attempt names it.
    error = provider_payment.last_payment_error
    return error.payment_method if error is not None else None


def _same_capture(actual: str, expected: str) -> bool:
    if expected in _AUTOMATIC_CAPTURE:
        return actual in _AUTOMATIC_CAPTURE
    return actual == expected


def payment_mismatches(
    provider_payment: ProviderPayment, expected: ExpectedPayment
) -> tuple[str, ...]:
    """Every way ``provider_payment`` differs from what the record asked for; empty means it is
    ours."""
    problems: list[str] = []
    named = provider_payment.metadata.get(RECORD_ID_METADATA_KEY)
    if named != expected.record_id:
        problems.append(f"metadata.{RECORD_ID_METADATA_KEY} {named!r} != {expected.record_id!r}")
    if provider_payment.amount != expected.amount:
        problems.append(f"amount {provider_payment.amount} != {expected.amount}")
    if provider_payment.currency.lower() != expected.currency:
        problems.append(f"currency {provider_payment.currency!r} != {expected.currency!r}")
    if provider_payment.customer != expected.customer:
        problems.append(f"customer {provider_payment.customer!r} != {expected.customer!r}")
    if not _same_capture(provider_payment.capture_method, expected.capture_method):
        problems.append(
            f"capture_method {provider_payment.capture_method!r} != {expected.capture_method!r}"
        )
    method = _payment_method_of(provider_payment)
    if expected.payment_method is None:
        pass  # an object-shaped method: not named by an id (see ExpectedPayment)
    elif method is None:
        problems.append("no payment method")
    elif method != expected.payment_method and not expected.payment_method.startswith(
        TEST_PAYMENT_METHOD_PREFIX
    ):
        problems.append(f"payment_method {method!r} != {expected.payment_method!r}")
    if (
        provider_payment.status == "succeeded"
        and provider_payment.amount_received is not None
        and provider_payment.amount_received != expected.amount
    ):
        problems.append(f"amount_received {provider_payment.amount_received} != {expected.amount}")
    return tuple(problems)


@dataclass(frozen=True)
class RejectedPayment:
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


def reject(provider_payment: ProviderPayment, reasons: tuple[str, ...]) -> RejectedPayment:
    return RejectedPayment(
        id=provider_payment.id,
        status=provider_payment.status,
        amount=provider_payment.amount,
        currency=provider_payment.currency,
        reasons=reasons,
    )
