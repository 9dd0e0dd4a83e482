"""What a provider payment's status means for our payment (pure).

The charge's reading of the provider's truth, beside it in the engine rather than in the
domain: it reads the provider's payment and its statuses, and the domain knows no provider.

Called after every successful create/confirm/retrieve: it is the "query first" decision
table.  Only ``CONFIRM`` allows a new confirm; everything else is either a settled
outcome or a reason to wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.domain.model import Failure
from orchestrator.domain.states import Outcome
from orchestrator.providers.base import ProviderPayment


class Next(StrEnum):
    SETTLE = "settle"  # the provider decided: record ``outcome``
    CONFIRM = "confirm"  # proven not confirmed yet: a (new) confirm is safe
    WAIT = "wait"  # the provider is still working (``processing``): ask again later
    AWAIT_CUSTOMER = "await_customer"  # ``requires_action``: the customer must authenticate


@dataclass(frozen=True)
class Reading:
    next: Next
    outcome: Outcome | None = None
    failure: Failure | None = None
    charge_id: str | None = None


def read_payment(provider_payment: ProviderPayment) -> Reading:
    status = provider_payment.status
    if status == "succeeded":
        return Reading(Next.SETTLE, Outcome.SUCCEEDED, charge_id=provider_payment.latest_charge)
    if status == "requires_confirmation":
        return Reading(Next.CONFIRM)
    if status == "processing":
        return Reading(Next.WAIT)
    if status == "requires_payment_method":
        error = provider_payment.last_payment_error
        if error is None:
            # Created without a usable payment method and never confirmed: confirming
            # will surface the provider's reason as a decline or a permanent error.
            return Reading(Next.CONFIRM)
        failure = Failure(
            code=error.code or "card_declined",
            decline_code=error.decline_code,
            message=error.message or "The payment method was declined.",
            kind=error.kind,
        )
        return Reading(Next.SETTLE, Outcome.FAILED, failure=failure)
    if status == "requires_action":
        # The customer must authenticate (3-D Secure): the payment waits for them
        # (engine.kinds.charge decides what an off-session payment does instead).
        return Reading(Next.AWAIT_CUSTOMER)
    if status == "canceled":
        failure = Failure(code="canceled", message="The provider canceled the payment.")
        return Reading(Next.SETTLE, Outcome.CANCELED, failure=failure)
    if status == "requires_capture":
        # Manual capture: authorised.  The charge is done; a capture operation takes the
        # money (``check_ours`` already refused a provider payment whose capture method is not the
        # record's, so an automatic payment never settles here).
        return Reading(
            Next.SETTLE, Outcome.REQUIRES_CAPTURE, charge_id=provider_payment.latest_charge
        )
    # A status the provider adds later: never guess with money, stop and let an operator look.
    raise UnexpectedPaymentStatus(status)


# An off-session payment (no customer present) whose card asks for authentication: it cannot
# complete, and the merchant must bring the customer back on session.
AUTHENTICATION_REQUIRED = Failure(
    code="authentication_required",
    decline_code="authentication_required",
    message="The payment method requires customer authentication.",
)
# The customer did not authenticate in time: payorch canceled the payment at the provider.
AUTHENTICATION_TIMEOUT = Failure(
    code="authentication_timeout",
    message="The customer did not complete authentication in time; the payment was canceled.",
)


class UnexpectedPaymentStatus(Exception):
    def __init__(self, status: str) -> None:
        super().__init__(f"unexpected provider payment status {status!r}")
        self.status = status
