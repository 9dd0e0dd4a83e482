"""The simulator behaves like Stripe where payorch depends on it, checked through the real SDK
against a real simulator server: object shapes, payment methods, idempotency, consistency."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import stripe
from stripe.params import PaymentIntentCreateParams

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from devtools.simulator.objects import fixture_payment_intent
from orchestrator.providers.base import Declined, Permanent, ProviderError, Retryable
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.integration.simulator_helpers import (
    create_payment,
    find_listed,
    make_provider,
    record_id,
)

pytest_plugins = ["tests.integration.simulator_fixtures"]

FIXTURE_FIELDS = set(fixture_payment_intent())


# -- objects ---------------------------------------------------------------------------


def test_the_packaged_fixture_is_stripes_payment_intent() -> None:
    fixture = fixture_payment_intent()
    assert fixture["object"] == "payment_intent"
    assert {"id", "status", "amount", "latest_charge", "last_payment_error"} <= FIXTURE_FIELDS


def test_intents_carry_every_top_level_field_of_stripes_fixture_in_every_state(
    provider: StripeProvider,
) -> None:
    paid = create_payment(provider, record := record_id())
    confirmed = provider.confirm_payment(paid.id, record_id=record, attempt=1)
    declined = create_payment(
        provider, other := record_id(), payment_method="pm_card_chargeDeclined"
    )
    with pytest.raises(Declined):
        provider.confirm_payment(declined.id, record_id=other, attempt=1)
    after_decline = provider.retrieve_payment(declined.id)
    listed = find_listed(provider, record)

    assert listed is not None
    for intent in (paid, confirmed, declined, after_decline, listed):
        assert set(intent.raw) >= FIXTURE_FIELDS, FIXTURE_FIELDS - set(intent.raw)
        assert list(intent.raw)[: len(FIXTURE_FIELDS)] == list(fixture_payment_intent())


def test_a_created_intent_looks_like_a_real_one(provider: StripeProvider) -> None:
    intent = create_payment(provider, record := record_id(), amount=2500)

    raw = intent.raw
    assert raw["id"].startswith("pi_")
    assert raw["object"] == "payment_intent"
    assert raw["client_secret"].startswith(f"{raw['id']}_secret_")
    assert raw["status"] == "requires_confirmation"
    assert raw["amount"] == 2500
    assert raw["amount_received"] == 0
    assert raw["currency"] == "usd"
    assert raw["livemode"] is False
    assert raw["payment_method"].startswith("pm_")  # the token became a PaymentMethod
    assert raw["payment_method_types"] == ["card"]
    assert raw["metadata"] == {"payorch_record_id": record}
    assert raw["latest_charge"] is None
    assert raw["last_payment_error"] is None
    assert raw["canceled_at"] is None
    assert abs(raw["created"] - datetime.now(UTC).timestamp()) < 60


def test_nested_metadata_round_trips_through_the_form_encoding(provider: StripeProvider) -> None:
    metadata = {"order": "A-17", "note": "a=b&c[d]=e", "empty_is_unset": ""}

    intent = provider.create_payment(
        record_id=(record := record_id()),
        amount=1000,
        currency="eur",
        payment_method="pm_card_mastercard",
        description="two shirts",
        metadata=metadata,
    )

    assert intent.metadata == {"order": "A-17", "note": "a=b&c[d]=e", "payorch_record_id": record}
    assert intent.raw["description"] == "two shirts"
    assert intent.currency == "eur"


# -- payment methods and money ---------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["pm_card_visa", "pm_card_mastercard", "pm_card_amex", "pm_card_visa_debit"]
)
def test_a_success_token_confirms_into_one_money_movement(
    provider: StripeProvider, simulator: RunningSimulator, token: str
) -> None:
    intent = create_payment(provider, record := record_id(), payment_method=token, amount=1234)

    confirmed = provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert confirmed.status == "succeeded"
    assert confirmed.raw["amount_received"] == 1234
    assert confirmed.latest_charge is not None
    assert confirmed.latest_charge.startswith("ch_")
    movements = simulator.admin.movements()
    assert movements["total"] == 1
    assert movements["by_intent"] == {intent.id: 1}
    assert movements["by_record"] == {record: 1}
    assert movements["amount"] == {"usd": 1234}
    assert movements["charges"][0]["charge"] == confirmed.latest_charge


@pytest.mark.parametrize(
    ("token", "code", "decline_code"),
    [
        ("pm_card_chargeDeclined", "card_declined", "generic_decline"),
        ("pm_card_visa_chargeDeclined", "card_declined", "generic_decline"),
        ("pm_card_chargeDeclinedInsufficientFunds", "card_declined", "insufficient_funds"),
        ("pm_card_chargeDeclinedLostCard", "card_declined", "lost_card"),
        ("pm_card_chargeDeclinedExpiredCard", "expired_card", "expired_card"),
        ("pm_card_chargeDeclinedIncorrectCvc", "incorrect_cvc", "incorrect_cvc"),
        ("pm_card_chargeDeclinedProcessingError", "processing_error", "processing_error"),
    ],
)
def test_a_decline_token_answers_402_with_stripes_codes_and_moves_no_money(
    provider: StripeProvider,
    simulator: RunningSimulator,
    token: str,
    code: str,
    decline_code: str,
) -> None:
    intent = create_payment(provider, record := record_id(), payment_method=token)

    with pytest.raises(Declined) as caught:
        provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert (caught.value.code, caught.value.decline_code) == (code, decline_code)
    assert caught.value.provider_payment_id == intent.id
    after = provider.retrieve_payment(intent.id)
    assert after.status == "requires_payment_method"
    assert after.last_payment_error is not None
    assert (after.last_payment_error.code, after.last_payment_error.decline_code) == (
        code,
        decline_code,
    )
    assert after.latest_charge is not None  # the failed charge
    assert after.raw["payment_method"] is None
    movements = simulator.admin.movements()
    assert movements["total"] == 0
    assert movements["declines"]["by_record"] == {record: 1}


def test_confirming_a_succeeded_intent_is_unexpected_state_so_money_moves_at_most_once(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    provider.confirm_payment(intent.id, record_id=record, attempt=1)

    with pytest.raises(Permanent) as caught:
        provider.confirm_payment(intent.id, record_id=record, attempt=2)

    assert caught.value.code == "payment_intent_unexpected_state"
    assert simulator.admin.movements()["by_record"] == {record: 1}


def test_confirming_a_declined_intent_again_without_a_new_card_is_unexpected_state(
    provider: StripeProvider,
) -> None:
    intent = create_payment(
        provider, record := record_id(), payment_method="pm_card_chargeDeclined"
    )
    with pytest.raises(Declined):
        provider.confirm_payment(intent.id, record_id=record, attempt=1)

    with pytest.raises(Permanent) as caught:
        provider.confirm_payment(intent.id, record_id=record, attempt=2)

    assert caught.value.code == "payment_intent_unexpected_state"


def test_an_unknown_payment_method_is_resource_missing(provider: StripeProvider) -> None:
    with pytest.raises(Permanent) as caught:
        create_payment(provider, record_id(), payment_method="pm_card_doesNotExist")

    assert caught.value.code == "resource_missing"
    assert caught.value.http_status == 400


def test_a_missing_intent_is_404_resource_missing(provider: StripeProvider) -> None:
    with pytest.raises(Permanent) as caught:
        provider.retrieve_payment("pi_doesnotexist")

    assert (caught.value.code, caught.value.http_status) == ("resource_missing", 404)


def test_only_secret_test_keys_are_accepted(simulator: RunningSimulator) -> None:
    with (
        StripeProvider(
            api_key="sk_live_not_here", api_base=simulator.url, connect_timeout=1, read_timeout=2
        ) as live,
        pytest.raises(Permanent) as caught,
    ):
        live.retrieve_payment("pi_any")

    assert caught.value.http_status == 401


def test_unknown_parameters_are_refused_like_stripe(provider: StripeProvider) -> None:
    with pytest.raises(stripe.InvalidRequestError) as caught:
        provider.sdk.v1.payment_intents.create(
            {"amount": 1000, "currency": "usd", "colour": "red"}  # type: ignore[typeddict-unknown-key]
        )

    assert caught.value.code == "parameter_unknown"
    assert caught.value.param == "colour"


def test_a_server_side_confirm_of_a_dashboard_methods_intent_needs_a_return_url(
    provider: StripeProvider,
) -> None:
    # Stripe's trap that the adapter sidesteps with payment_method_types=['card'].
    intent = provider.sdk.v1.payment_intents.create(
        {"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}
    )

    with pytest.raises(stripe.InvalidRequestError) as caught:
        provider.sdk.v1.payment_intents.confirm(intent.id)

    assert caught.value.param == "return_url"


# -- idempotency -----------------------------------------------------------------------


def test_the_same_key_and_params_replay_the_saved_response_with_the_replayed_header(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    params: PaymentIntentCreateParams = {"amount": 1000, "currency": "usd"}
    first = provider.sdk.v1.payment_intents.create(params, {"idempotency_key": "k-replay"})
    second = provider.sdk.v1.payment_intents.create(params, {"idempotency_key": "k-replay"})

    assert second.id == first.id
    assert first.last_response is not None and second.last_response is not None
    assert second.last_response.body == first.last_response.body
    assert second.last_response.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.last_response.headers
    assert [r["replayed"] for r in simulator.admin.requests()] == [False, True]


def test_a_saved_decline_replays_without_a_second_charge_attempt(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(
        provider, record := record_id(), payment_method="pm_card_chargeDeclined"
    )

    for _ in range(2):
        with pytest.raises(Declined):
            provider.confirm_payment(intent.id, record_id=record, attempt=1)

    assert simulator.admin.movements()["declines"]["total"] == 1
    assert simulator.admin.requests(intent_id=intent.id)[-1]["replayed"] is True


def test_the_same_key_with_other_params_is_an_idempotency_error(provider: StripeProvider) -> None:
    create_payment(provider, record := record_id(), amount=1000)

    with pytest.raises(Permanent) as caught:
        create_payment(provider, record, amount=2000)

    assert caught.value.code == "idempotency_error"
    assert caught.value.http_status == 400


def test_the_same_key_on_another_endpoint_is_an_idempotency_error(
    provider: StripeProvider,
) -> None:
    intent = provider.sdk.v1.payment_intents.create(
        {"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"},
        {"idempotency_key": "k-shared"},
    )

    with pytest.raises(stripe.IdempotencyError) as caught:
        provider.sdk.v1.payment_intents.confirm(
            intent.id, {"return_url": "https://example.com"}, {"idempotency_key": "k-shared"}
        )

    assert "same endpoint" in str(caught.value)


def test_a_validation_failure_is_not_saved_so_the_fixed_request_may_reuse_the_key(
    provider: StripeProvider,
) -> None:
    with pytest.raises(Permanent) as caught:
        create_payment(provider, record := record_id(), amount=10)  # below Stripe's minimum
    assert caught.value.code == "amount_too_small"

    intent = create_payment(provider, record, amount=1000)

    assert intent.status == "requires_confirmation"


def test_idempotency_keys_are_scoped_per_api_key(simulator: RunningSimulator) -> None:
    record = record_id()
    with (
        StripeProvider(
            api_key="sk_test_merchant_a", api_base=simulator.url, connect_timeout=1, read_timeout=2
        ) as a,
        StripeProvider(
            api_key="sk_test_merchant_b", api_base=simulator.url, connect_timeout=1, read_timeout=2
        ) as b,
    ):
        first = create_payment(a, record, amount=1000)
        second = create_payment(b, record, amount=2000)

    assert first.id != second.id


def test_truly_concurrent_twins_execute_once_and_the_others_get_409_key_in_use(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    intent = create_payment(provider, record := record_id())
    # The first twin holds the key for a second; the rest arrive meanwhile.
    simulator.admin.add_fault("confirm:latency:seconds=1.0:times=1")
    twins = 6
    barrier = threading.Barrier(twins)
    outcomes: list[object] = []
    lock = threading.Lock()

    def confirm() -> None:
        barrier.wait()
        try:
            result: object = provider.confirm_payment(intent.id, record_id=record, attempt=1)
        except ProviderError as exc:
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=confirm) for _ in range(twins)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    conflicts = [o for o in outcomes if isinstance(o, Retryable)]
    successes = [o for o in outcomes if not isinstance(o, ProviderError)]
    assert len(successes) == 1
    assert len(conflicts) == twins - 1
    assert {(c.code, c.http_status) for c in conflicts} == {("idempotency_key_in_use", 409)}
    assert simulator.admin.movements()["by_record"] == {record: 1}
    confirms = [
        r for r in simulator.admin.requests(intent_id=intent.id) if r["operation"] == "confirm"
    ]
    statuses = sorted(r["status"] for r in confirms)
    assert statuses == [200] + [409] * (twins - 1)


# -- consistency -----------------------------------------------------------------------


def test_list_filters_by_created_time_and_pages_newest_first(provider: StripeProvider) -> None:
    ids = [create_payment(provider, record_id()).id for _ in range(5)]
    since = int((datetime.now(UTC) - timedelta(minutes=1)).timestamp())

    page = provider.sdk.v1.payment_intents.list({"created": {"gte": since}, "limit": 2})
    every = [i.id for i in page.auto_paging_iter()]
    none = provider.sdk.v1.payment_intents.list({"created": {"gt": since + 3600}})

    assert page.has_more is True
    assert every == list(reversed(ids))
    assert none.data == []


def test_list_orders_by_creation_time_not_arrival_and_pages_a_seeded_busy_account(
    simulator: RunningSimulator, provider: StripeProvider
) -> None:
    now = int(time.time())
    ours = create_payment(provider, record_id())
    # Seeded later but created earlier: Stripe lists by ``created``, not by arrival.
    older = simulator.simulator.seed_intent(amount=777, created=now - 100)
    simulator.simulator.seed_intents(250, created_from=now + 10, created_step=0.1)

    seen: list[str] = []
    cursor = None
    while True:
        page = provider.list_payments(
            created_gte=now - 200, created_lte=now + 200, starting_after=cursor, limit=100
        )
        seen.extend(i.id for i in page.provider_payments)
        if not page.has_more:
            break
        cursor = page.provider_payments[-1].id

    assert len(seen) == 252 and len(set(seen)) == 252
    assert seen[-2:] == [ours.id, older]
    outside = provider.list_payments(
        created_gte=now - 200, created_lte=now + 5, starting_after=None, limit=100
    )
    assert [i.id for i in outside.provider_payments] == [ours.id, older]


def test_search_lags_behind_while_retrieve_and_list_are_current(
    provider: StripeProvider,
) -> None:
    intent = create_payment(provider, record := record_id())
    query = f"metadata['payorch_record_id']:'{record}'"

    found = provider.sdk.v1.payment_intents.search({"query": query})

    assert found.data == []  # not yet indexed: never decide anything on search
    assert provider.retrieve_payment(intent.id).id == intent.id
    listed = find_listed(provider, record)
    assert listed is not None and listed.id == intent.id


@pytest.fixture
def current_search_simulator() -> Iterator[RunningSimulator]:
    with start_in_thread(SimulatorConfig(search_lag_seconds=0.0)) as simulator:
        yield simulator


def test_search_finds_an_intent_once_the_lag_has_passed(
    current_search_simulator: RunningSimulator,
) -> None:
    with make_provider(current_search_simulator.url) as provider:
        intent = create_payment(provider, record := record_id(), amount=4321)
        other = create_payment(provider, record_id(), amount=4321)

        found = provider.sdk.v1.payment_intents.search(
            {"query": f"metadata['payorch_record_id']:'{record}' AND amount:4321"}
        )
        by_status = provider.sdk.v1.payment_intents.search(
            {"query": "status:'requires_confirmation'", "limit": 1}
        )

    assert [i.id for i in found.data] == [intent.id]
    assert by_status.has_more is True
    assert by_status.data[0].id == other.id
