"""Captures, cancels and refunds in the simulator behave like Stripe's, checked through the
real SDK (``StripeProvider``) against a real simulator server: statuses, amounts, Stripe's
errors and wording, idempotency, the fault modes, and the money log that counts captures and
refunds.  Every answer is checked against Stripe's OpenAPI schemas (``simulator_fixtures``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from orchestrator.providers.base import (
    OutcomeUnknown,
    Permanent,
    ProviderPayment,
    ProviderRefund,
    Retryable,
)
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.integration.simulator_helpers import make_provider, record_id
from tests.replay.stripe_schema import AnswerWatch

pytest_plugins = ["tests.integration.simulator_fixtures"]


def _paid(
    provider: StripeProvider,
    *,
    amount: int = 1000,
    capture_method: str = "automatic",
    payment_method: str = "pm_card_visa",
    currency: str = "usd",
) -> ProviderPayment:
    record = record_id()
    intent = provider.create_payment(
        record_id=record,
        amount=amount,
        currency=currency,
        payment_method=payment_method,
        description=None,
        metadata={},
        capture_method=capture_method,
    )
    return provider.confirm_payment(intent.id, record_id=record, attempt=1)


def _refund(
    provider: StripeProvider, intent: ProviderPayment, amount: int, *, operation: str = ""
) -> ProviderRefund:
    return provider.create_refund(
        provider_payment_id=intent.id,
        operation_id=operation or record_id(),
        attempt=1,
        amount=amount,
        reason=None,
        metadata={},
    )


# -- manual capture --------------------------------------------------------------------


def test_a_manual_capture_intent_stops_at_requires_capture_holding_the_whole_amount(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")

    assert intent.status == "requires_capture"
    assert intent.capture_method == "manual"
    assert (intent.amount_capturable, intent.amount_received) == (1000, 0)
    assert intent.latest_charge is not None
    money = simulator.admin.movements()
    assert money["total"] == 1  # the authorisation
    assert money["captures"]["total"] == 0


def test_a_partial_capture_succeeds_with_what_was_captured_and_counts_one_capture(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")

    captured = provider.capture_payment(
        intent.id, operation_id="cap-1", attempt=1, amount_to_capture=600
    )

    assert captured.status == "succeeded"
    assert (captured.amount_received, captured.amount_capturable) == (600, 0)
    money = simulator.admin.movements()
    assert money["captures"]["by_intent"] == {intent.id: 1}
    assert money["captures"]["items"][0]["amount"] == 600


def test_a_capture_without_an_amount_captures_everything(provider: StripeProvider) -> None:
    intent = _paid(provider, capture_method="manual", amount=2500)

    captured = provider.capture_payment(
        intent.id, operation_id="cap-1", attempt=1, amount_to_capture=None
    )

    assert (captured.status, captured.amount_received) == ("succeeded", 2500)


def test_capturing_an_intent_that_is_not_capturable_is_stripes_unexpected_state(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    automatic = _paid(provider)
    manual = _paid(provider, capture_method="manual")
    provider.capture_payment(manual.id, operation_id="cap-1", attempt=1, amount_to_capture=None)

    for intent, operation in ((automatic, "cap-2"), (manual, "cap-3")):
        with pytest.raises(Permanent) as caught:
            provider.capture_payment(
                intent.id, operation_id=operation, attempt=1, amount_to_capture=None
            )
        assert caught.value.code == "payment_intent_unexpected_state"
        assert caught.value.message == (
            "This PaymentIntent could not be captured because it has a status of succeeded. "
            "Only a PaymentIntent with one of the following statuses may be captured: "
            "requires_capture."
        )
    assert simulator.admin.movements()["captures"]["total"] == 1


def test_capturing_more_than_is_capturable_is_refused_and_captures_nothing(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")

    with pytest.raises(Permanent) as caught:
        provider.capture_payment(intent.id, operation_id="cap-1", attempt=1, amount_to_capture=1001)

    assert (caught.value.code, caught.value.http_status) == ("amount_too_large", 400)
    assert provider.retrieve_payment(intent.id).status == "requires_capture"
    assert simulator.admin.movements()["captures"]["total"] == 0


# -- cancel ----------------------------------------------------------------------------


def test_canceling_an_authorisation_releases_it_with_the_reason(provider: StripeProvider) -> None:
    intent = _paid(provider, capture_method="manual")

    canceled = provider.cancel_payment(
        intent.id, operation_id="cxl-1", attempt=1, reason="requested_by_customer"
    )

    assert canceled.status == "canceled"
    assert canceled.cancellation_reason == "requested_by_customer"
    assert canceled.amount_capturable == 0
    assert canceled.raw["canceled_at"] is not None


def test_an_unconfirmed_intent_can_be_canceled_and_then_never_confirmed(
    provider: StripeProvider,
) -> None:
    record = record_id()
    intent = provider.create_payment(
        record_id=record,
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
    )

    provider.cancel_payment(intent.id, operation_id="cxl-1", attempt=1, reason=None)
    with pytest.raises(Permanent) as caught:
        provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert caught.value.code == "payment_intent_unexpected_state"


def test_canceling_after_success_is_stripes_unexpected_state(provider: StripeProvider) -> None:
    intent = _paid(provider)

    with pytest.raises(Permanent) as caught:
        provider.cancel_payment(intent.id, operation_id="cxl-1", attempt=1, reason=None)

    assert caught.value.code == "payment_intent_unexpected_state"
    assert caught.value.message.startswith(
        "You cannot cancel this PaymentIntent because it has a status of succeeded."
    )
    assert provider.retrieve_payment(intent.id).status == "succeeded"


def test_a_cancellation_reason_stripe_does_not_know_is_refused(provider: StripeProvider) -> None:
    intent = _paid(provider, capture_method="manual")

    with pytest.raises(Permanent) as caught:
        provider.cancel_payment(intent.id, operation_id="cxl-1", attempt=1, reason="bored")

    assert caught.value.http_status == 400
    assert provider.retrieve_payment(intent.id).status == "requires_capture"


def test_an_authorisation_never_captured_expires_as_stripe_cancels_it(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")

    simulator.admin.expire_authorization(intent.id)
    expired = provider.retrieve_payment(intent.id)
    with pytest.raises(Permanent) as late:
        provider.capture_payment(intent.id, operation_id="cap-1", attempt=1, amount_to_capture=None)

    assert (expired.status, expired.cancellation_reason) == ("canceled", "automatic")
    assert late.value.code == "payment_intent_unexpected_state"
    assert simulator.admin.movements()["captures"]["total"] == 0


# -- refunds ---------------------------------------------------------------------------


def test_partial_refunds_add_up_and_the_money_log_counts_each_once(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider)

    first = _refund(provider, intent, 300, operation="rfd-a")
    second = _refund(provider, intent, 700, operation="rfd-b")

    assert (first.status, first.amount, first.provider_payment_id) == ("succeeded", 300, intent.id)
    assert first.metadata["payorch_refund_id"] == "rfd-a"
    refunds = simulator.admin.movements()["refunds"]
    assert refunds["by_refund_id"] == {"rfd-a": 1, "rfd-b": 1}
    assert refunds["amount"] == {"usd": 1000}
    assert {i["refund"] for i in refunds["items"]} == {first.id, second.id}


def test_over_refunds_are_refused_with_stripes_wording(provider: StripeProvider) -> None:
    intent = _paid(provider)

    with pytest.raises(Permanent) as untouched:
        _refund(provider, intent, 1500)
    _refund(provider, intent, 400)
    with pytest.raises(Permanent) as partly:
        _refund(provider, intent, 700)
    _refund(provider, intent, 600)
    with pytest.raises(Permanent) as fully:
        _refund(provider, intent, 1)

    assert untouched.value.code == "amount_too_large"
    assert untouched.value.message == (
        "Refund amount ($15.00) is greater than charge amount ($10.00)"
    )
    assert partly.value.code == "amount_too_large"
    assert partly.value.message == (
        "Refund amount ($7.00) is greater than unrefunded amount on charge ($6.00)"
    )
    assert fully.value.code == "charge_already_refunded"
    assert fully.value.message == f"Charge {intent.latest_charge} has already been refunded."


def test_a_partly_captured_charge_refunds_only_what_was_captured(
    provider: StripeProvider,
) -> None:
    intent = _paid(provider, capture_method="manual")
    provider.capture_payment(intent.id, operation_id="cap-1", attempt=1, amount_to_capture=600)

    with pytest.raises(Permanent) as caught:
        _refund(provider, intent, 601)
    assert _refund(provider, intent, 600).status == "succeeded"
    assert caught.value.code == "amount_too_large"


@pytest.mark.parametrize("how", ["unconfirmed", "uncaptured", "canceled"])
def test_an_intent_without_a_captured_charge_cannot_be_refunded(
    provider: StripeProvider, how: str
) -> None:
    if how == "unconfirmed":
        intent = provider.create_payment(
            record_id=record_id(),
            amount=1000,
            currency="usd",
            payment_method="pm_card_visa",
            description=None,
            metadata={},
        )
    else:
        intent = _paid(provider, capture_method="manual")
        if how == "canceled":
            provider.cancel_payment(intent.id, operation_id="cxl", attempt=1, reason=None)

    with pytest.raises(Permanent) as caught:
        _refund(provider, intent, 100)

    assert caught.value.code == "charge_not_refundable"


def test_refunds_are_listed_newest_first_page_by_page_and_retrieved_by_id(
    provider: StripeProvider,
) -> None:
    intent = _paid(provider)
    other = _paid(provider)
    made = [_refund(provider, intent, 100) for _ in range(3)]
    _refund(provider, other, 100)

    first = provider.list_refunds(intent.id, starting_after=None, limit=2)
    second = provider.list_refunds(intent.id, starting_after=first.refunds[-1].id, limit=2)

    assert [r.id for r in first.refunds] == [made[2].id, made[1].id]
    assert first.has_more is True
    assert [r.id for r in second.refunds] == [made[0].id]
    assert second.has_more is False
    assert provider.retrieve_refund(made[1].id) == made[1]
    with pytest.raises(Permanent) as missing:
        provider.retrieve_refund("re_payorchDoesNotExist0001")
    assert (missing.value.code, missing.value.http_status) == ("resource_missing", 404)


def test_a_refund_resent_with_its_key_is_the_same_refund_and_moves_money_once(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider)

    first = _refund(provider, intent, 250, operation="rfd-1")
    again = _refund(provider, intent, 250, operation="rfd-1")
    with pytest.raises(Permanent) as reused:
        _refund(provider, intent, 260, operation="rfd-1")

    assert again == first
    assert reused.value.code == "idempotency_error"
    assert simulator.admin.movements()["refunds"]["by_refund_id"] == {"rfd-1": 1}


def test_concurrent_refunds_with_distinct_keys_never_exceed_the_charge(
    simulator: RunningSimulator,
) -> None:
    with make_provider(simulator.url) as setup:
        intent = _paid(setup, amount=1000)
    outcomes: list[str] = []
    lock = threading.Lock()

    def refund(n: int) -> None:
        with make_provider(simulator.url) as provider:
            try:
                _refund(provider, intent, 100, operation=f"rfd-{n}")
                result = "refunded"
            except Permanent as error:
                result = str(error.code)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=refund, args=(n,)) for n in range(25)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("refunded") == 10
    assert set(outcomes) <= {"refunded", "charge_already_refunded", "amount_too_large"}
    assert simulator.admin.movements()["refunds"]["amount"] == {"usd": 1000}


# -- refunds that move on later, and refunds made outside payorch ----------------------


def test_a_refund_on_the_refund_fail_card_succeeds_then_fails_and_the_money_comes_back(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, payment_method="pm_card_refundFail")
    refund = _refund(provider, intent, 1000)

    settled = simulator.admin.settle_refund(refund.id)
    after = provider.retrieve_refund(refund.id)

    assert refund.status == "succeeded"
    assert settled["status"] == "failed"
    assert (after.status, after.failure_reason) == ("failed", "expired_or_canceled_card")
    assert simulator.admin.movements()["refunds"]["amount"] == {}
    assert _refund(provider, intent, 1000).status == "succeeded"  # refundable again


def test_a_pending_refund_settles_when_told(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, payment_method="pm_card_sim_refundPending")
    refund = _refund(provider, intent, 500)

    simulator.admin.settle_refund(refund.id)

    assert refund.status == "pending"
    assert provider.retrieve_refund(refund.id).status == "succeeded"


@pytest.fixture
def settling_simulator() -> Iterator[RunningSimulator]:
    watch = AnswerWatch()
    with start_in_thread(
        SimulatorConfig(refund_settle_seconds=0.0, answer_observer=watch)
    ) as simulator:
        yield simulator
    watch.assert_clean()


def test_with_a_settle_delay_refunds_move_on_by_themselves(
    settling_simulator: RunningSimulator,
) -> None:
    with make_provider(settling_simulator.url) as provider:
        pending = _refund(provider, _paid(provider, payment_method="pm_card_sim_refundPending"), 1)
        failing = _refund(provider, _paid(provider, payment_method="pm_card_refundFail"), 1)

        assert provider.retrieve_refund(pending.id).status == "succeeded"
        assert provider.retrieve_refund(failing.id).status == "failed"


def test_a_dashboard_refund_is_listed_without_our_metadata_and_respects_the_charge(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider)

    made = simulator.admin.dashboard_refund(intent.id, amount=400, reason="duplicate")
    [listed] = provider.list_refunds(intent.id, starting_after=None, limit=10).refunds
    with pytest.raises(Permanent) as caught:
        _refund(provider, intent, 700)

    assert listed.id == made["id"]
    assert (listed.amount, listed.reason, listed.metadata) == (400, "duplicate", {})
    assert caught.value.message.endswith("unrefunded amount on charge ($6.00)")
    [item] = simulator.admin.movements()["refunds"]["items"]
    assert (item["origin"], item["refund_id"]) == ("dashboard", None)


# -- faults ----------------------------------------------------------------------------


def test_a_refund_that_timed_out_after_the_effect_is_found_by_listing_and_replayed_by_key(
    impatient_provider: StripeProvider, provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider)
    simulator.admin.add_fault("refund:timeout_after_effect:times=1")

    with pytest.raises(OutcomeUnknown):
        _refund(impatient_provider, intent, 300, operation="rfd-1")
    # What the worker does next: ask before re-sending.
    [found] = provider.list_refunds(intent.id, starting_after=None, limit=10).refunds
    again = _refund(provider, intent, 300, operation="rfd-1")

    assert found.metadata["payorch_refund_id"] == "rfd-1"
    assert again.id == found.id
    assert simulator.admin.movements()["refunds"]["by_refund_id"] == {"rfd-1": 1}


def test_a_capture_answered_500_after_the_effect_captured_once_and_retrieve_tells(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")
    simulator.admin.add_fault("capture:error_500_after:times=1")

    for _ in range(2):  # the saved 500 replays under the same key
        with pytest.raises(OutcomeUnknown):
            provider.capture_payment(
                intent.id, operation_id="cap-1", attempt=1, amount_to_capture=None
            )

    assert provider.retrieve_payment(intent.id).status == "succeeded"
    assert simulator.admin.movements()["captures"]["total"] == 1


def test_a_cancel_answered_500_before_the_effect_did_nothing_and_may_be_resent(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider, capture_method="manual")
    simulator.admin.add_fault("cancel:error_500_before:times=1")

    with pytest.raises(OutcomeUnknown):
        provider.cancel_payment(intent.id, operation_id="cxl-1", attempt=1, reason=None)
    assert provider.retrieve_payment(intent.id).status == "requires_capture"
    canceled = provider.cancel_payment(intent.id, operation_id="cxl-1", attempt=1, reason=None)

    assert canceled.status == "canceled"


def test_a_rate_limited_refund_is_retryable_and_refunds_nothing(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(provider)
    simulator.admin.add_fault("refund:rate_limit:retry_after=2:times=1")

    with pytest.raises(Retryable) as limited:
        _refund(provider, intent, 100, operation="rfd-1")

    assert limited.value.retry_after == 2.0
    assert simulator.admin.movements()["refunds"]["total"] == 0
    assert _refund(provider, intent, 100, operation="rfd-1").status == "succeeded"


def test_a_hung_capture_is_an_unknown_outcome_that_captured_nothing(
    impatient_provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = _paid(impatient_provider, capture_method="manual")
    simulator.admin.add_fault("capture:hang:seconds=1:times=1")

    with pytest.raises(OutcomeUnknown):
        impatient_provider.capture_payment(
            intent.id, operation_id="cap-1", attempt=1, amount_to_capture=None
        )

    assert simulator.admin.movements()["captures"]["total"] == 0
    assert impatient_provider.retrieve_payment(intent.id).status == "requires_capture"
