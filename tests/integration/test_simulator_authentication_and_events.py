"""3-D Secure, off-session payments, asynchronous outcomes, Stripe's events and signed webhook
delivery (with its faults) in the simulator, checked through the real SDK: every answer
against Stripe's OpenAPI schemas, every webhook through ``stripe.Webhook.construct_event``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import stripe

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from orchestrator.providers.base import Declined, Permanent, ProviderPayment
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.providers.stripe_objects import parse_webhook_event
from tests.integration.simulator_helpers import make_provider, record_id
from tests.integration.webhook_receiver import (
    DELIVERY_DEADLINE_SECONDS,
    Received,
    WebhookReceiver,
    webhook_receiver,
)
from tests.replay.stripe_schema import AnswerWatch

pytest_plugins = ["tests.integration.simulator_fixtures"]

SECRET = "whsec_payorch_simulator_tests"


def _create(
    provider: StripeProvider,
    payment_method: str,
    *,
    capture_method: str = "automatic",
    customer: str | None = None,
    amount: int = 1000,
) -> tuple[str, ProviderPayment]:
    record = record_id()
    intent = provider.create_payment(
        record_id=record,
        amount=amount,
        currency="usd",
        payment_method=payment_method,
        description=None,
        metadata={},
        capture_method=capture_method,
        customer=customer,
    )
    return record, intent


def _confirm(
    provider: StripeProvider,
    payment_method: str,
    *,
    off_session: bool | None = None,
    return_url: str | None = None,
    capture_method: str = "automatic",
) -> ProviderPayment:
    record, intent = _create(provider, payment_method, capture_method=capture_method)
    return provider.confirm_payment(
        intent.id, record_id=record, attempt=1, off_session=off_session, return_url=return_url
    )


# -- 3-D Secure ------------------------------------------------------------------------

THREE_D_SECURE_CARDS = [
    "pm_card_threeDSecure2Required",
    "pm_card_threeDSecureRequired",
    "pm_card_authenticationRequired",
    "pm_card_authenticationRequiredOnSetup",
]


@pytest.mark.parametrize("card", THREE_D_SECURE_CARDS)
def test_a_card_that_needs_authentication_asks_for_a_redirect_to_the_return_url(
    provider: StripeProvider, simulator: RunningSimulator, card: str
) -> None:
    intent = _confirm(provider, card, return_url="https://shop.example/back")

    assert intent.status == "requires_action"
    assert intent.next_action is not None
    assert intent.next_action["type"] == "redirect_to_url"
    assert intent.next_action["redirect_to_url"]["return_url"] == "https://shop.example/back"
    assert intent.next_action["redirect_to_url"]["url"].startswith("https://")
    assert intent.client_token is not None
    assert intent.client_token.startswith(f"{intent.id}_secret_")
    assert simulator.admin.movements()["total"] == 0


def test_without_a_return_url_stripe_js_handles_the_authentication(
    provider: StripeProvider,
) -> None:
    intent = _confirm(provider, "pm_card_threeDSecure2Required")

    assert intent.status == "requires_action"
    assert intent.next_action is not None
    assert intent.next_action["type"] == "use_stripe_sdk"


def test_a_completed_authentication_charges_once(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    waiting = _confirm(provider, "pm_card_threeDSecure2Required", return_url="https://r")

    simulator.admin.authenticate(waiting.id)
    paid = provider.retrieve_payment(waiting.id)

    assert (paid.status, paid.amount_received, paid.next_action) == ("succeeded", 1000, None)
    assert simulator.admin.movements()["by_intent"] == {waiting.id: 1}


def test_an_authenticated_manual_capture_intent_waits_for_its_capture(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    waiting = _confirm(provider, "pm_card_authenticationRequired", capture_method="manual")

    simulator.admin.authenticate(waiting.id)

    held = provider.retrieve_payment(waiting.id)
    assert (held.status, held.amount_capturable) == ("requires_capture", 1000)


def test_a_failed_authentication_leaves_the_intent_without_a_payment_method(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    waiting = _confirm(provider, "pm_card_threeDSecure2Required", return_url="https://r")

    simulator.admin.authenticate(waiting.id, succeed=False)
    after = provider.retrieve_payment(waiting.id)

    assert after.status == "requires_payment_method"
    assert after.last_payment_error is not None
    assert after.last_payment_error.code == "payment_intent_authentication_failure"
    assert simulator.admin.movements()["total"] == 0


def test_a_card_declined_after_authentication_is_declined_then(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    waiting = _confirm(provider, "pm_card_authenticationRequiredChargeDeclinedInsufficientFunds")

    simulator.admin.authenticate(waiting.id)
    after = provider.retrieve_payment(waiting.id)

    assert after.status == "requires_payment_method"
    assert after.last_payment_error is not None
    assert after.last_payment_error.decline_code == "insufficient_funds"
    assert simulator.admin.movements()["declines"]["by_intent"] == {waiting.id: 1}


def test_authenticating_an_intent_that_is_not_waiting_is_refused(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    paid = _confirm(provider, "pm_card_visa")

    with pytest.raises(Exception, match="409"):
        simulator.admin.authenticate(paid.id)


def test_an_abandoned_authentication_can_be_canceled(provider: StripeProvider) -> None:
    waiting = _confirm(provider, "pm_card_threeDSecure2Required")

    canceled = provider.cancel_payment(
        waiting.id, operation_id="cxl", attempt=1, reason="abandoned"
    )

    assert (canceled.status, canceled.cancellation_reason) == ("canceled", "abandoned")
    assert canceled.next_action is None


# -- off-session ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "card", ["pm_card_authenticationRequired", "pm_card_threeDSecure2Required"]
)
def test_off_session_a_card_that_needs_authentication_declines_authentication_required(
    provider: StripeProvider, simulator: RunningSimulator, card: str
) -> None:
    record, intent = _create(provider, card, customer="cus_payorchTest")

    with pytest.raises(Declined) as declined:
        provider.confirm_payment(intent.id, record_id=record, attempt=1, off_session=True)
    after = provider.retrieve_payment(intent.id)

    assert declined.value.code == "authentication_required"
    assert declined.value.decline_code == "authentication_required"
    assert declined.value.message == (
        "Your card was declined. This transaction requires authentication."
    )
    assert declined.value.provider_payment_id == intent.id
    assert after.status == "requires_payment_method"
    assert after.customer == "cus_payorchTest"
    assert simulator.admin.movements()["total"] == 0


def test_off_session_a_card_set_up_for_later_payments_succeeds(provider: StripeProvider) -> None:
    intent = _confirm(provider, "pm_card_authenticationRequiredOnSetup", off_session=True)

    assert intent.status == "succeeded"


def test_a_card_where_authentication_is_optional_succeeds_without_it(
    provider: StripeProvider,
) -> None:
    assert _confirm(provider, "pm_card_threeDSecureOptional").status == "succeeded"


def test_a_customer_that_is_not_a_customer_id_is_refused(provider: StripeProvider) -> None:
    with pytest.raises(Permanent) as caught:
        _create(provider, "pm_card_visa", customer="someone")

    assert caught.value.code == "resource_missing"


# -- asynchronous outcomes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("card", "settled"),
    [
        ("pm_card_sim_processingSucceeds", "succeeded"),
        ("pm_card_sim_processingFails", "requires_payment_method"),
    ],
)
def test_an_asynchronous_method_answers_processing_then_settles(
    provider: StripeProvider, simulator: RunningSimulator, card: str, settled: str
) -> None:
    processing = _confirm(provider, card)

    assert processing.status == "processing"
    assert simulator.admin.movements()["total"] == 0
    simulator.admin.settle_intent(processing.id)
    assert provider.retrieve_payment(processing.id).status == settled
    expected = 1 if settled == "succeeded" else 0
    assert simulator.admin.movements()["total"] == expected


def test_a_processing_intent_can_be_settled_either_way_when_told(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    processing = _confirm(provider, "pm_card_sim_processingSucceeds")

    simulator.admin.settle_intent(processing.id, "failed")

    assert provider.retrieve_payment(processing.id).status == "requires_payment_method"


@pytest.fixture
def settling_simulator() -> Iterator[RunningSimulator]:
    watch = AnswerWatch()
    config = SimulatorConfig(processing_settle_seconds=0.0, answer_observer=watch)
    with start_in_thread(config) as simulator:
        yield simulator
    watch.assert_clean()


def test_with_a_settle_delay_a_processing_intent_settles_by_itself(
    settling_simulator: RunningSimulator,
) -> None:
    with make_provider(settling_simulator.url) as provider:
        processing = _confirm(provider, "pm_card_sim_processingSucceeds")

        assert processing.status == "processing"
        assert provider.retrieve_payment(processing.id).status == "succeeded"


# -- events ----------------------------------------------------------------------------


def _events(provider: StripeProvider, **params: Any) -> list[dict[str, Any]]:
    page = provider.sdk.v1.events.list({"limit": 100, **params})  # type: ignore[typeddict-item]
    return [e.to_dict() for e in page.data]


def test_each_change_of_a_3ds_payment_is_an_event_whose_object_is_a_snapshot(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    waiting = _confirm(provider, "pm_card_threeDSecure2Required", return_url="https://r")
    simulator.admin.authenticate(waiting.id)

    events = list(reversed(_events(provider)))  # oldest first

    assert [e["type"] for e in events] == [
        "payment_intent.created",
        "payment_intent.requires_action",
        "payment_intent.succeeded",
    ]
    assert [e["data"]["object"]["status"] for e in events] == [
        "requires_confirmation",
        "requires_action",
        "succeeded",
    ]
    assert all(e["data"]["object"]["id"] == waiting.id for e in events)
    # The confirm's event names its request and key; the customer's authentication none.
    assert events[1]["request"]["idempotency_key"].endswith("-confirm-1")
    assert events[1]["request"]["id"].startswith("req_")
    assert events[2]["request"] == {"id": None, "idempotency_key": None}


def test_declines_captures_cancels_and_refunds_each_have_their_event(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    with pytest.raises(Declined):
        _confirm(provider, "pm_card_chargeDeclined")
    held = _confirm(provider, "pm_card_visa", capture_method="manual")
    provider.capture_payment(held.id, operation_id="cap", attempt=1, amount_to_capture=None)
    other = _confirm(provider, "pm_card_visa", capture_method="manual")
    provider.cancel_payment(other.id, operation_id="cxl", attempt=1, reason=None)
    provider.create_refund(
        provider_payment_id=held.id,
        operation_id="rfd",
        attempt=1,
        amount=300,
        reason=None,
        metadata={},
    )

    types = [e["type"] for e in reversed(_events(provider))]

    assert "payment_intent.payment_failed" in types
    assert types.count("payment_intent.amount_capturable_updated") == 2
    assert "payment_intent.canceled" in types
    assert types[-2:] == ["refund.created", "charge.refunded"]
    [refunded] = _events(provider, type="charge.refunded")
    charge = refunded["data"]["object"]
    assert (charge["object"], charge["payment_intent"], charge["amount_refunded"]) == (
        "charge",
        held.id,
        300,
    )


def test_a_refund_that_fails_later_and_a_dispute_are_events_about_the_intent(
    provider: StripeProvider, simulator: RunningSimulator
) -> None:
    paid = _confirm(provider, "pm_card_refundFail")
    refund = provider.create_refund(
        provider_payment_id=paid.id,
        operation_id="rfd",
        attempt=1,
        amount=1000,
        reason=None,
        metadata={},
    )
    simulator.admin.settle_refund(refund.id)
    disputed = _confirm(provider, "pm_card_visa")
    dispute = simulator.admin.open_dispute(disputed.id)

    updated = _events(provider, type="refund.updated")
    [failed] = _events(provider, type="refund.failed")
    [charge_update] = _events(provider, type="charge.refund.updated")
    [dispute_event] = _events(provider, type="charge.dispute.created")

    assert [e["data"]["object"]["status"] for e in updated] == ["failed"]
    assert updated[0]["data"]["previous_attributes"] == {"status": "succeeded"}
    assert failed["data"]["object"]["id"] == refund.id
    assert charge_update["data"]["object"]["payment_intent"] == paid.id
    assert dispute_event["data"]["object"]["id"] == dispute["id"]
    assert dispute_event["data"]["object"]["payment_intent"] == disputed.id


def test_events_are_listed_newest_first_filtered_paged_and_retrieved(
    provider: StripeProvider,
) -> None:
    for _ in range(3):
        _confirm(provider, "pm_card_visa")

    intents_only = _events(provider, type="payment_intent.*")
    succeeded = _events(provider, type="payment_intent.succeeded")
    both = _events(provider, types=["payment_intent.created", "payment_intent.succeeded"])
    first = provider.sdk.v1.events.list({"limit": 4})
    rest = provider.sdk.v1.events.list({"limit": 4, "starting_after": first.data[-1].id})
    one = provider.sdk.v1.events.retrieve(succeeded[0]["id"])

    assert len(intents_only) == 6 and len(succeeded) == 3 and len(both) == 6
    assert [e["created"] for e in intents_only] == sorted(
        (e["created"] for e in intents_only), reverse=True
    )
    assert first.has_more is True and len(rest.data) == 2 and rest.has_more is False
    assert {e.id for e in first.data}.isdisjoint({e.id for e in rest.data})
    assert one.id == succeeded[0]["id"] and one.type == "payment_intent.succeeded"
    with pytest.raises(stripe.InvalidRequestError) as missing:
        provider.sdk.v1.events.retrieve("evt_payorchDoesNotExist")
    assert missing.value.http_status == 404


# -- webhooks --------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


@pytest.fixture
def delivering(
    simulator: RunningSimulator, receiver: WebhookReceiver
) -> Iterator[RunningSimulator]:
    # A reordered event waits long for its successor: on a busy machine the next event can
    # take a while, and the test must see the reorder, not the hold running out.
    simulator.admin.configure_webhooks(receiver.url, SECRET, reorder_hold_seconds=30.0)
    yield simulator
    simulator.admin.configure_webhooks(None, None)


def _verified(item: Received) -> stripe.Event:
    return stripe.Webhook.construct_event(item.body, item.signature, SECRET)


def _ids(items: list[Received]) -> list[str]:
    return [json.loads(i.body)["id"] for i in items]


def test_every_event_is_delivered_signed_as_stripe_signs(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    paid = _confirm(provider, "pm_card_visa")

    got = receiver.wait_for(lambda r: len(r) == 2, what="created and succeeded")

    events = [_verified(item) for item in got]
    assert [e.type for e in events] == ["payment_intent.created", "payment_intent.succeeded"]
    assert events[1].data.object.id == paid.id
    assert [e.id for e in events] == [e["id"] for e in reversed(_events(provider))]
    assert all(item.signature and item.signature.startswith("t=") for item in got)
    # The adapter's parser reads the same deliveries (what the webhook route will use).
    parsed = parse_webhook_event(got[1].body, got[1].signature or "", SECRET)
    assert (parsed.type, parsed.provider_payment_id) == ("payment_intent.succeeded", paid.id)


def test_a_delivery_verified_with_another_secret_is_refused(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    _confirm(provider, "pm_card_visa")
    [first, *_] = receiver.wait_for(lambda r: len(r) >= 1, what="a delivery")

    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(first.body, first.signature, "whsec_someone_else")


def test_a_dropped_event_is_never_delivered_but_stays_listed(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    delivering.admin.add_fault("webhook:drop:times=1")

    _confirm(provider, "pm_card_visa")
    got = receiver.wait_for(lambda r: len(r) == 1, what="the second event")

    listed = [e["id"] for e in reversed(_events(provider))]
    assert _ids(got) == listed[1:]
    log = delivering.admin.webhook_deliveries()
    assert (log[0]["event"], log[0]["outcome"]) == (listed[0], "dropped")


def test_a_duplicated_event_arrives_twice_with_the_same_id(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    delivering.admin.add_fault("webhook:duplicate:times=1")

    _confirm(provider, "pm_card_visa")
    got = receiver.wait_for(lambda r: len(r) == 3, what="three deliveries")

    ids = _ids(got)
    assert ids[0] == ids[1] != ids[2]
    assert all(_verified(item) for item in got)


def test_a_reordered_event_arrives_after_the_one_that_followed_it(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    delivering.admin.add_fault("webhook:reorder:times=1")

    _confirm(provider, "pm_card_visa")
    got = receiver.wait_for(lambda r: len(r) == 2, what="both events")

    assert [_verified(i).type for i in got] == [
        "payment_intent.succeeded",
        "payment_intent.created",
    ]


def test_a_delayed_event_is_overtaken_by_later_ones(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    # Long enough that the next event (a confirm later) overtakes it on a busy machine too.
    delivering.admin.add_fault("webhook:delay:seconds=4:times=1")

    _confirm(provider, "pm_card_visa")
    got = receiver.wait_for(lambda r: len(r) == 2, what="both events")

    assert _verified(got[0]).type == "payment_intent.succeeded"
    assert _verified(got[1]).type == "payment_intent.created"


def test_a_delivery_the_endpoint_refuses_is_retried_until_it_is_accepted(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    receiver.refuse_first = 2
    _create(provider, "pm_card_visa")

    log = _wait_for_log(delivering, lambda log: any(d["outcome"] == "delivered" for d in log))

    got = receiver.snapshot()
    assert len({json.loads(i.body)["id"] for i in got}) == 1  # one event, several attempts
    assert [d["attempt"] for d in log][:2] == [1, 2]
    assert [d["outcome"] for d in log][:2] == ["failed", "failed"]
    assert log[-1]["outcome"] == "delivered"


def _wait_for_log(simulator: RunningSimulator, condition: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + DELIVERY_DEADLINE_SECONDS
    while True:
        log = simulator.admin.webhook_deliveries()
        if condition(log):
            return log
        assert time.monotonic() < deadline, f"delivery log never got there: {log}"
        time.sleep(0.02)


def test_webhook_faults_never_touch_api_requests_and_any_never_touches_webhooks(
    provider: StripeProvider, delivering: RunningSimulator, receiver: WebhookReceiver
) -> None:
    delivering.admin.add_fault("webhook:drop")
    delivering.admin.add_fault("any:latency:seconds=0")

    paid = _confirm(provider, "pm_card_visa")
    log = _wait_for_log(delivering, lambda log: len(log) == 2)

    assert paid.status == "succeeded"
    assert [(d["outcome"], d["fault"]) for d in log] == [("dropped", "drop")] * 2
    assert receiver.snapshot() == []
    api_faults = [r["fault"] for r in delivering.admin.requests()]
    assert api_faults == ["latency", "latency"]
