"""Each fault mode of the simulator, seen through the adapter the way the worker sees it, and
the money each one moves (or does not)."""

from __future__ import annotations

import time

import pytest

from devtools.simulator import RunningSimulator
from orchestrator.providers.base import OutcomeUnknown, Retryable
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.integration.simulator_helpers import create_payment, record_id

pytest_plugins = ["tests.integration.simulator_fixtures"]


def _confirms(simulator: RunningSimulator, provider_payment_id: str) -> list[dict[str, object]]:
    return [
        r
        for r in simulator.admin.requests(intent_id=provider_payment_id)
        if r["operation"] == "confirm"
    ]


def test_latency_delays_the_answer_and_changes_nothing_else(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    simulator.admin.add_fault("confirm:latency:seconds=0.3")

    started = time.monotonic()
    confirmed = provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert time.monotonic() - started >= 0.3
    assert confirmed.status == "succeeded"
    assert _confirms(simulator, intent.id)[0]["fault"] == "latency"


def test_a_timeout_after_the_effect_is_an_unknown_outcome_though_the_money_moved(
    impatient_provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(impatient_provider, record := record_id())
    simulator.admin.add_fault("confirm:timeout_after_effect:times=1")

    with pytest.raises(OutcomeUnknown):
        impatient_provider.confirm_payment(intent.id, record_id=record, attempt=1)
    # What the worker does next: query first.
    queried = impatient_provider.retrieve_payment(intent.id)

    assert queried.status == "succeeded"
    assert simulator.admin.movements()["by_record"] == {record: 1}
    log = simulator.admin.requests(intent_id=intent.id)
    timed_out = next(i for i, r in enumerate(log) if r["fault"] == "timeout_after_effect")
    assert log[timed_out + 1]["method"] == "GET"


def test_resending_a_timed_out_confirm_with_its_key_replays_the_saved_success(
    impatient_provider: StripeProvider, provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    simulator.admin.add_fault("confirm:timeout_after_effect:times=1")
    with pytest.raises(OutcomeUnknown):
        impatient_provider.confirm_payment(intent.id, record_id=record, attempt=1)

    again = provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert again.status == "succeeded"
    assert _confirms(simulator, intent.id)[-1]["replayed"] is True
    assert simulator.admin.movements()["total"] == 1


def test_a_500_before_the_effect_does_nothing_and_is_not_saved_under_the_key(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    simulator.admin.add_fault("confirm:error_500_before:times=1")

    with pytest.raises(OutcomeUnknown) as caught:
        provider.confirm_payment(intent.id, record_id=record, attempt=1)
    assert caught.value.http_status == 500
    assert provider.retrieve_payment(intent.id).status == "requires_confirmation"
    assert simulator.admin.movements()["total"] == 0

    retried = provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert retried.status == "succeeded"
    assert _confirms(simulator, intent.id)[-1]["replayed"] is False


def test_a_500_after_the_effect_is_saved_and_replays_forever_under_the_same_key(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    simulator.admin.add_fault("confirm:error_500_after:times=1")

    for _ in range(2):
        with pytest.raises(OutcomeUnknown) as caught:
            provider.confirm_payment(intent.id, record_id=record, attempt=1)
        assert caught.value.http_status == 500

    assert [r["replayed"] for r in _confirms(simulator, intent.id)] == [False, True]
    assert provider.retrieve_payment(intent.id).status == "succeeded"
    assert simulator.admin.movements()["by_record"] == {record: 1}


def test_a_rate_limit_is_retryable_with_retry_after_and_does_nothing(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    simulator.admin.add_fault("create:rate_limit:retry_after=4:times=1")
    record = record_id()

    with pytest.raises(Retryable) as caught:
        create_payment(provider, record)
    assert (caught.value.retry_after, caught.value.http_status) == (4.0, 429)

    created = create_payment(provider, record)

    assert created.status == "requires_confirmation"
    assert len(provider.sdk.v1.payment_intents.list().data) == 1


def test_a_hang_is_an_unknown_outcome_that_did_nothing(
    impatient_provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(impatient_provider, record := record_id())
    simulator.admin.add_fault("confirm:hang:times=1")

    with pytest.raises(OutcomeUnknown):
        impatient_provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert impatient_provider.retrieve_payment(intent.id).status == "requires_confirmation"
    assert simulator.admin.movements()["total"] == 0
    assert _confirms(simulator, intent.id)[0]["status"] is None  # still hanging


def test_a_fault_for_an_amount_hits_only_that_amount(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    simulator.admin.add_fault("confirm:error_500_before:amounts=1313")
    unlucky = create_payment(provider, unlucky_record := record_id(), amount=1313)
    lucky = create_payment(provider, lucky_record := record_id(), amount=1314)

    with pytest.raises(OutcomeUnknown):
        provider.confirm_payment(unlucky.id, record_id=unlucky_record, attempt=1)
    confirmed = provider.confirm_payment(lucky.id, record_id=lucky_record, attempt=1)

    assert confirmed.status == "succeeded"


def test_a_limited_rule_is_spent_after_its_occurrences(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    rule = simulator.admin.add_fault("retrieve:error_500_before:times=2")
    intent = create_payment(provider, record_id())

    outcomes = []
    for _ in range(3):
        try:
            provider.retrieve_payment(intent.id)
            outcomes.append("ok")
        except OutcomeUnknown:
            outcomes.append("500")

    assert outcomes == ["500", "500", "ok"]
    assert simulator.admin.faults() == [{**rule, "fired": 2, "remaining": 0}]


def test_faults_can_be_listed_removed_and_cleared_at_run_time(
    simulator: RunningSimulator,
) -> None:
    first = simulator.admin.add_fault("any:latency:0.5:seconds=0.01")
    second = simulator.admin.add_fault("confirm:hang")

    assert [r["spec"] for r in simulator.admin.faults()] == [
        "any:latency:0.5:seconds=0.01",
        "confirm:hang",
    ]
    simulator.admin.remove_fault(first["id"])
    assert [r["id"] for r in simulator.admin.faults()] == [second["id"]]
    simulator.admin.clear_faults()
    assert simulator.admin.faults() == []


def test_reset_forgets_intents_keys_money_and_the_log(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    provider.confirm_payment(intent.id, record_id=record, attempt=1)

    simulator.admin.reset()

    assert simulator.admin.movements()["total"] == 0
    assert simulator.admin.requests() == []
    assert create_payment(provider, record).id != intent.id  # the key was forgotten too
