"""The query-first decision table: what an intent's status allows us to do next."""

from __future__ import annotations

import pytest

from orchestrator.domain.states import Outcome
from orchestrator.engine.kinds.payment_reading import Next, UnexpectedPaymentStatus, read_payment
from orchestrator.providers.base import PaymentError, ProviderPayment


def intent(status: str, **kw) -> ProviderPayment:
    return ProviderPayment(id="pi_1", status=status, amount=100, currency="usd", metadata={}, **kw)


def test_succeeded_settles_a_success_with_the_charge():
    reading = read_payment(intent("succeeded", latest_charge="ch_1"))
    assert (reading.next, reading.outcome, reading.charge_id) == (
        Next.SETTLE,
        Outcome.SUCCEEDED,
        "ch_1",
    )


def test_only_requires_confirmation_allows_a_new_confirm():
    assert read_payment(intent("requires_confirmation")).next is Next.CONFIRM


def test_processing_means_wait_and_ask_again():
    assert read_payment(intent("processing")).next is Next.WAIT


def test_a_declined_intent_settles_a_failure_with_the_decline_codes():
    error = PaymentError("card_declined", "insufficient_funds", "Your card has insufficient funds.")
    reading = read_payment(intent("requires_payment_method", last_payment_error=error))
    assert reading.next is Next.SETTLE and reading.outcome is Outcome.FAILED
    assert reading.failure is not None
    assert (reading.failure.code, reading.failure.decline_code) == (
        "card_declined",
        "insufficient_funds",
    )


def test_requires_action_means_wait_for_the_customer():
    assert read_payment(intent("requires_action")).next is Next.AWAIT_CUSTOMER


def test_a_canceled_intent_settles_a_canceled_payment():
    reading = read_payment(intent("canceled"))
    assert reading.next is Next.SETTLE and reading.outcome is Outcome.CANCELED
    assert reading.failure is not None and reading.failure.code == "canceled"


def test_requires_capture_settles_an_authorisation_for_a_capture_to_take():
    reading = read_payment(
        intent("requires_capture", latest_charge="ch_1", capture_method="manual")
    )
    assert (reading.next, reading.outcome, reading.charge_id) == (
        Next.SETTLE,
        Outcome.REQUIRES_CAPTURE,
        "ch_1",
    )


@pytest.mark.parametrize("status", ["something_new", "requires_reauthorization"])
def test_unexpected_statuses_are_never_guessed(status):
    with pytest.raises(UnexpectedPaymentStatus):
        read_payment(intent(status))
