"""The Adyen simulator over real HTTP (``devtools/adyen_simulator``): Checkout v71 payments
and modifications, Adyen's idempotency, the test data, notifications (HMAC-signed, retried,
dropped / duplicated / reordered) and the fault language.

Every answer is checked against Adyen's OpenAPI subset (``AdyenWatch``) and every
notification received against the notification schemas and its HMAC signature.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    NotificationSink,
    RunningAdyenSimulator,
    start_in_thread,
)
from orchestrator.providers.adyen_hmac import verify_item
from tests.integration.adyen_simulator_helpers import (
    API_KEY,
    HMAC_KEY,
    MERCHANT,
    Checkout,
    amount_body,
    card,
    payment,
)
from tests.replay.adyen_schema import AdyenWatch, notification_errors

STALL_SECONDS = 1.5
MAX_ATTEMPTS = 5
# The key one test rotates to (the endpoint then accepts both, as during a rotation).
ROTATED_KEY = "AB" * 32


@pytest.fixture(scope="module")
def sink() -> Iterator[NotificationSink]:
    with NotificationSink() as sink:
        yield sink


@pytest.fixture(scope="module")
def running(sink: NotificationSink) -> Iterator[RunningAdyenSimulator]:
    watch = AdyenWatch()
    config = AdyenSimulatorConfig(
        stall_seconds=STALL_SECONDS,
        notification_url=sink.url,
        hmac_key=HMAC_KEY,
        notification_retry_seconds=0.1,
        notification_max_attempts=MAX_ATTEMPTS,
        notification_reorder_hold_seconds=3.0,
        answer_observer=watch,
    )
    with start_in_thread(config) as simulator:
        yield simulator
    watch.assert_clean()
    assert watch.checked > 0


@pytest.fixture
def sim(running: RunningAdyenSimulator, sink: NotificationSink) -> Iterator[RunningAdyenSimulator]:
    running.admin.reset()
    sink.clear()
    yield running
    _quiet(running)
    # Whatever arrived must be what Adyen could send, signed with the endpoint's key.
    for body in sink.bodies():
        assert body["live"] == "false"
        assert notification_errors(body) == []
        for wrapper in body["notificationItems"]:
            assert verify_item(wrapper["NotificationRequestItem"], [HMAC_KEY, ROTATED_KEY])


def _quiet(simulator: RunningAdyenSimulator, timeout: float = 10.0) -> None:
    """Wait until every notification made has reached its end (delivered, dropped, or out
    of attempts): one test's notifications must not reach the next test's sink."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = httpx.get(f"{simulator.url}/_sim/notifications", trust_env=False).json()
        if not state["enabled"]:
            return
        ended = {
            d["seq"]
            for d in state["deliveries"]
            if d["outcome"] in ("delivered", "dropped") or d["attempt"] >= MAX_ATTEMPTS
        }
        if len(ended) >= len(state["items"]):
            return
        time.sleep(0.05)
    raise AssertionError("notifications still in flight after the test")


@pytest.fixture
def checkout(sim: RunningAdyenSimulator) -> Iterator[Checkout]:
    client = Checkout(sim.checkout_url)
    yield client
    client.close()


def events(sink: NotificationSink, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    return sink.wait_for(lambda items: len(items) >= count, timeout)


def event(items: list[dict[str, Any]], code: str, psp: str | None = None) -> dict[str, Any]:
    found = [
        i for i in items if i["eventCode"] == code and (psp is None or i["pspReference"] == psp)
    ]
    assert len(found) == 1, items
    return found[0]


# -- the edges: authentication, merchant account, unknown paths ------------------------


def test_no_api_key_is_401_in_adyens_shape(sim: RunningAdyenSimulator) -> None:
    response = httpx.post(f"{sim.checkout_url}/payments", json=payment(), trust_env=False)
    assert response.status_code == 401
    assert response.json() == {
        "status": 401,
        "errorCode": "000",
        "message": "HTTP Status Response - Unauthorized",
        "errorType": "security",
    }


def test_merchant_account_is_required(checkout: Checkout) -> None:
    body = payment()
    del body["merchantAccount"]
    response = checkout.post("/payments", body)
    assert response.status_code == 400
    error = response.json()
    assert set(error) == {"status", "errorCode", "message", "errorType"}
    assert error["errorType"] == "validation" and "merchantAccount" in error["message"]


def test_reference_and_amount_are_required(checkout: Checkout) -> None:
    body = payment()
    del body["reference"]
    response = checkout.post("/payments", body)
    assert (response.status_code, response.json()["errorCode"]) == (422, "130")
    body = payment()
    del body["amount"]
    assert checkout.post("/payments", body).status_code == 422


def test_an_invalid_card_number_is_422_101(checkout: Checkout) -> None:
    response = checkout.post("/payments", payment(method=card("4111111111111112")))
    assert (response.status_code, response.json()["errorCode"]) == (422, "101")


def test_the_live_shape_of_the_root_is_served_too(sim: RunningAdyenSimulator) -> None:
    live = Checkout(f"{sim.url}/checkout/v71")
    try:
        assert live.pay(payment())["resultCode"] == "Authorised"
    finally:
        live.close()
    response = httpx.post(
        f"{sim.url}/v70/payments", json=payment(), headers={"X-API-Key": API_KEY}, trust_env=False
    )
    assert response.status_code == 404


# -- payments and the test data ------------------------------------------------------------


def test_a_test_card_is_authorised_and_captured_automatically(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    body = payment(2500)
    answer = checkout.pay(body)
    assert answer["resultCode"] == "Authorised"
    assert len(answer["pspReference"]) == 16 and answer["pspReference"].isalnum()
    assert answer["merchantReference"] == body["reference"]
    (state,) = sim.admin.payments(reference=body["reference"])
    assert (state["status"], state["captured"], state["manualCapture"]) == (
        "authorised",
        2500,
        False,
    )
    item = event(events(sink, 1), "AUTHORISATION")
    assert item["success"] == "true"
    assert item["pspReference"] == answer["pspReference"]
    assert item["merchantReference"] == body["reference"]
    assert item["merchantAccountCode"] == MERCHANT
    assert item["amount"] == {"currency": "EUR", "value": 2500}
    time.sleep(0.2)
    # Auto-capture is CAPTURE-free, as at Adyen: the AUTHORISATION is the only notification.
    assert [i["eventCode"] for i in sink.items()] == ["AUTHORISATION"]
    assert sim.admin.movements()["authorisations"]["total"] == 1


@pytest.mark.parametrize(
    ("holder", "result_code", "reason", "code"),
    [
        ("DECLINED", "Refused", "Refused", "2"),
        ("NOT_ENOUGH_BALANCE", "Refused", "Not enough balance", "12"),
        ("CARD_EXPIRED", "Refused", "Expired Card", "6"),
        ("BLOCKED_CARD", "Refused", "Blocked Card", "5"),
        ("ISSUER_UNAVAILABLE", "Refused", "Issuer Unavailable", "9"),
        ("ACQUIRER_ERROR", "Refused", "Acquirer Error", "4"),
        ("ERROR", "Error", "Acquirer Error", "4"),
    ],
)
def test_holder_names_choose_the_refusal(
    checkout: Checkout,
    sim: RunningAdyenSimulator,
    sink: NotificationSink,
    holder: str,
    result_code: str,
    reason: str,
    code: str,
) -> None:
    answer = checkout.pay(payment(method=card("5555555555554444", holder)))
    assert answer["resultCode"] == result_code
    assert (answer["refusalReason"], answer["refusalReasonCode"]) == (reason, code)
    item = event(events(sink, 1), "AUTHORISATION")
    assert (item["success"], item["reason"]) == ("false", reason)
    movements = sim.admin.movements()
    assert movements["authorisations"]["total"] == 0
    assert movements["refusals"]["total"] == 1


def test_a_requested_acquirer_response_code_refuses_with_it(checkout: Checkout) -> None:
    body = payment()
    body["additionalData"] = {"RequestedTestAcquirerResponseCode": "24"}
    answer = checkout.pay(body)
    assert (answer["resultCode"], answer["refusalReasonCode"]) == ("Refused", "24")
    assert answer["refusalReason"] == "CVC Declined"


def test_a_pending_payment_settles_later_with_its_notification(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    answer = checkout.pay(payment(method=card(holder="PENDING")))
    assert answer["resultCode"] == "Pending"
    time.sleep(0.2)
    assert sink.items() == []
    settled = sim.admin.settle(answer["pspReference"])
    assert settled["resultCode"] == "Authorised"
    assert event(events(sink, 1), "AUTHORISATION")["success"] == "true"


def test_a_stored_payment_method_needs_its_shopper_reference(checkout: Checkout) -> None:
    stored = {"type": "scheme", "storedPaymentMethodId": "8415698462516992"}
    response = checkout.post("/payments", payment(method=stored))
    assert response.status_code == 422
    answer = checkout.pay(
        payment(
            method=stored,
            shopperReference="shopper_1",
            recurringProcessingModel="Subscription",
            shopperInteraction="ContAuth",
        )
    )
    assert answer["resultCode"] == "Authorised"
    assert answer["additionalData"]["recurring.recurringDetailReference"] == "8415698462516992"


def test_storing_a_card_returns_its_token(checkout: Checkout) -> None:
    answer = checkout.pay(
        payment(
            shopperReference="shopper_2",
            storePaymentMethod=True,
            recurringProcessingModel="CardOnFile",
            shopperInteraction="Ecommerce",
        )
    )
    assert len(answer["additionalData"]["recurring.recurringDetailReference"]) == 16


# -- 3-D Secure 2 -------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["5454545454545454", "4917610000000000"])
def test_a_3ds2_card_is_challenged_then_authorised_through_details(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink, number: str
) -> None:
    body = payment(method=card(number))
    answer = checkout.pay(body)
    assert answer["resultCode"] == "ChallengeShopper"
    action = answer["action"]
    assert (action["type"], action["subtype"]) == ("threeDS2", "challenge")
    assert action["paymentData"] and action["token"]
    time.sleep(0.1)
    assert sink.items() == []  # nothing decided yet
    result = sim.admin.three_ds_result(succeed=True)
    details = {"details": {"threeDSResult": result}, "paymentData": action["paymentData"]}
    done = checkout.post("/payments/details", details, key=str(uuid.uuid4()))
    assert done.status_code == 200
    assert done.json()["resultCode"] == "Authorised"
    assert done.json()["additionalData"]["liabilityShift"] == "true"
    item = event(events(sink, 1), "AUTHORISATION")
    assert (item["success"], item["pspReference"]) == ("true", done.json()["pspReference"])
    assert item["merchantReference"] == body["reference"]


def test_a_failed_challenge_refuses_with_3d_not_authenticated(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    action = checkout.pay(payment(method=card("5454545454545454")))["action"]
    # Without paymentData: the shopper's result names the payment by its authorisation token.
    result = sim.admin.three_ds_result(action["authorisationToken"], succeed=False)
    done = checkout.post("/payments/details", {"details": {"threeDSResult": result}})
    assert done.status_code == 200
    assert (done.json()["resultCode"], done.json()["refusalReasonCode"]) == ("Refused", "11")
    assert done.json()["refusalReason"] == "3D Not Authenticated"
    # Adyen's own documented passing value is {"transStatus":"Y"} in base64.
    assert sim.admin.three_ds_result() == "eyJ0cmFuc1N0YXR1cyI6IlkifQ=="


def test_details_for_an_unknown_payment_is_422(checkout: Checkout) -> None:
    body = {"details": {"threeDSResult": "eyJ0cmFuc1N0YXR1cyI6IlkifQ=="}, "paymentData": "nope"}
    assert checkout.post("/payments/details", body).status_code == 422


# -- idempotency ---------------------------------------------------------------------------


def test_a_replay_after_completion_returns_the_stored_answer(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    body = payment()
    key = str(uuid.uuid4())
    first = checkout.post("/payments", body, key=key)
    second = checkout.post("/payments", body, key=key)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert second.headers["Idempotency-Key"] == key
    assert len(sim.admin.payments(reference=body["reference"])) == 1
    assert [r["replayed"] for r in sim.admin.requests()] == [False, True]


def test_one_reference_under_two_keys_makes_two_payments(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    body = payment()
    one = checkout.pay(body, key=str(uuid.uuid4()))
    two = checkout.pay(body, key=str(uuid.uuid4()))
    assert one["pspReference"] != two["pspReference"]
    assert sim.admin.movements()["authorisations"]["by_reference"] == {body["reference"]: 2}


def test_a_replay_while_the_first_runs_is_422_704_transient(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:latency:seconds=2:times=1")
    body = payment()
    key = str(uuid.uuid4())
    first: list[httpx.Response] = []
    runner = threading.Thread(
        target=lambda: first.append(checkout.post("/payments", body, key=key))
    )
    runner.start()
    deadline = time.monotonic() + 5
    while not sim.admin.requests() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    twin = checkout.post("/payments", body, key=key)
    runner.join()
    assert twin.status_code == 422
    assert twin.json()["errorCode"] == "704"
    assert twin.headers["transient-error"] == "true"
    assert first[0].status_code == 200
    again = checkout.post("/payments", body, key=key)
    assert again.json() == first[0].json()
    assert len(sim.admin.payments(reference=body["reference"])) == 1


def test_an_idempotency_key_longer_than_64_is_refused(checkout: Checkout) -> None:
    assert checkout.post("/payments", payment(), key="k" * 64).status_code == 200
    assert checkout.post("/payments", payment(), key="k" * 65).status_code == 400


def test_keys_are_per_api_key(sim: RunningAdyenSimulator) -> None:
    body = payment()
    other = httpx.Client(
        base_url=sim.checkout_url, headers={"X-API-Key": "AQE_other"}, trust_env=False
    )
    mine = Checkout(sim.checkout_url)
    try:
        mine.pay(body, key="shared-key")
        assert (
            other.post(
                "/payments", json=body, headers={"Idempotency-Key": "shared-key"}
            ).status_code
            == 200
        )
    finally:
        other.close()
        mine.close()
    assert len(sim.admin.payments(reference=body["reference"])) == 2


def test_a_validation_error_is_not_saved_under_the_key(checkout: Checkout) -> None:
    body = payment()
    key = str(uuid.uuid4())
    broken = {**body, "amount": {"currency": "EUR", "value": "ten"}}
    assert checkout.post("/payments", broken, key=key).status_code == 422
    assert checkout.post("/payments", body, key=key).status_code == 200


# -- faults ---------------------------------------------------------------------------------


def test_a_timeout_after_the_effect_leaves_one_payment_that_a_replay_returns(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("payments:timeout_after_effect:times=1")
    body = payment()
    key = str(uuid.uuid4())
    with pytest.raises(httpx.ReadTimeout):
        checkout.post("/payments", body, key=key, timeout=0.3)
    # As a client must: a transient 704 (the first still running) is retried with the key.
    replay = checkout.post("/payments", body, key=key)
    deadline = time.monotonic() + 10
    while replay.status_code == 422 and replay.headers.get("transient-error") == "true":
        assert time.monotonic() < deadline
        time.sleep(0.1)
        replay = checkout.post("/payments", body, key=key)
    assert replay.status_code == 200
    (state,) = sim.admin.payments(reference=body["reference"])
    assert replay.json()["pspReference"] == state["pspReference"]
    assert sim.admin.movements()["authorisations"]["total"] == 1
    assert event(events(sink, 1), "AUTHORISATION")["pspReference"] == state["pspReference"]


def test_a_5xx_before_the_effect_makes_nothing_and_the_key_executes_later(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:error_500_before:status=503:times=1")
    body = payment()
    key = str(uuid.uuid4())
    failed = checkout.post("/payments", body, key=key)
    assert failed.status_code == 503
    assert failed.json()["errorType"] == "internal"
    assert sim.admin.payments(reference=body["reference"]) == []
    assert checkout.post("/payments", body, key=key).json()["resultCode"] == "Authorised"
    assert len(sim.admin.payments(reference=body["reference"])) == 1


def test_a_held_request_whose_client_goes_away_does_nothing_and_its_key_executes_later(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:hold:times=1")
    body = payment()
    key = str(uuid.uuid4())

    def logged() -> dict[str, Any]:
        (entry,) = [r for r in sim.admin.requests() if r["idempotency_key"] == key][:1]
        return entry

    # The client gives up: its connection closes, as a killed worker's does.
    with pytest.raises(httpx.ReadTimeout):
        checkout.post("/payments", body, key=key, timeout=0.5)
    deadline = time.monotonic() + 10
    while logged()["hold"] == "holding":
        assert time.monotonic() < deadline, logged()
        time.sleep(0.05)
    held = logged()
    assert (held["fault"], held["hold"], held["status"]) == ("hold", "client_gone", 500), held
    assert held["client"] and held["client"].startswith("127.0.0.1:"), held
    assert sim.admin.payments(reference=body["reference"]) == []
    assert sim.admin.movements()["authorisations"]["total"] == 0
    # Nothing was saved under the key: the same key executes now, once.
    again = checkout.post("/payments", body, key=key)
    assert again.status_code == 200 and not again.headers.get("transient-error")
    assert again.json()["resultCode"] == "Authorised"
    assert len(sim.admin.payments(reference=body["reference"])) == 1


def test_a_hold_ends_after_its_seconds_with_nothing_done(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:hold:seconds=0.3:times=1")
    body = payment()
    answer = checkout.post("/payments", body, key=str(uuid.uuid4()))
    assert answer.status_code == 500
    assert [r["hold"] for r in sim.admin.requests()] == ["timed_out"]
    assert sim.admin.payments(reference=body["reference"]) == []


def test_a_5xx_after_the_effect_keeps_the_payment_and_its_answer(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:error_500_after:times=1")
    body = payment()
    key = str(uuid.uuid4())
    assert checkout.post("/payments", body, key=key).status_code == 500
    (state,) = sim.admin.payments(reference=body["reference"])
    replay = checkout.post("/payments", body, key=key)
    assert replay.status_code == 200
    assert replay.json()["pspReference"] == state["pspReference"]
    assert len(sim.admin.payments(reference=body["reference"])) == 1


def test_faults_match_by_operation_and_amount(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    sim.admin.add_fault("payments:error_500_before:amounts=1313")
    assert checkout.post("/payments", payment(1000)).status_code == 200
    assert checkout.post("/payments", payment(1313)).status_code == 500
    rules = sim.admin.faults()
    assert rules[0]["fired"] == 1 and rules[0]["spec"] == "payments:error_500_before:amounts=1313"
    sim.admin.clear_faults()
    assert checkout.post("/payments", payment(1313)).status_code == 200


# -- modifications --------------------------------------------------------------------------


def test_manual_capture_in_part_closes_the_rest(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    answer = checkout.pay(payment(1000, manual=True))
    psp = answer["pspReference"]
    (state,) = sim.admin.payments(reference=answer["merchantReference"])
    assert (state["manualCapture"], state["captured"]) == (True, 0)
    capture = checkout.modify(psp, "captures", amount_body(400))
    assert capture["amount"] == {"currency": "EUR", "value": 400}
    assert capture["pspReference"] != psp
    again = checkout.modify(psp, "captures", amount_body(100))
    items = events(sink, 3)
    first = event(items, "CAPTURE", capture["pspReference"])
    assert (first["success"], first["originalReference"], first["amount"]["value"]) == (
        "true",
        psp,
        400,
    )
    # Adyen's default: a partial capture cancels the remainder.
    assert event(items, "CAPTURE", again["pspReference"])["success"] == "false"
    movements = sim.admin.movements()
    assert movements["captures"]["total"] == 1
    assert movements["captures"]["amount"] == {"EUR": 400}


def test_capture_more_than_authorised_fails_in_its_notification(
    checkout: Checkout, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000, manual=True))["pspReference"]
    over = checkout.modify(psp, "captures", amount_body(1001))
    item = event(events(sink, 2), "CAPTURE", over["pspReference"])
    assert item["success"] == "false" and item["reason"]


def test_capture_delay_hours_means_a_manual_capture(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    answer = checkout.pay(payment(1000, captureDelayHours=24))
    (state,) = sim.admin.payments(reference=answer["merchantReference"])
    assert (state["manualCapture"], state["captured"]) == (True, 0)


def test_multiple_partial_captures_when_the_account_allows_them(sink: NotificationSink) -> None:
    config = AdyenSimulatorConfig(multiple_partial_captures=True)
    with start_in_thread(config) as simulator:
        client = Checkout(simulator.checkout_url)
        try:
            psp = client.pay(payment(1000, manual=True))["pspReference"]
            for value in (300, 300, 400):
                client.modify(psp, "captures", amount_body(value))
            client.modify(psp, "captures", amount_body(1))
        finally:
            client.close()
        movements = simulator.admin.movements()
        assert movements["captures"]["total"] == 3
        assert movements["captures"]["amount"] == {"EUR": 1000}
        items = simulator.admin.notification_items()
        assert [i["success"] for i in items if i["eventCode"] == "CAPTURE"] == [
            "true",
            "true",
            "true",
            "false",
        ]


def test_a_capture_that_fails_later_sends_capture_failed(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000, manual=True, method=card(holder="capture failed")))[
        "pspReference"
    ]
    capture = checkout.modify(psp, "captures", amount_body(1000))
    items = events(sink, 3)
    assert event(items, "CAPTURE")["success"] == "true"
    failed = event(items, "CAPTURE_FAILED")
    assert (failed["success"], failed["pspReference"]) == ("true", capture["pspReference"])
    assert sim.admin.movements()["captures"]["total"] == 0


def test_partial_refunds_up_to_the_captured_sum(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000))["pspReference"]
    refunds = [checkout.modify(psp, "refunds", amount_body(v)) for v in (600, 300, 200)]
    items = events(sink, 4)
    assert [event(items, "REFUND", r["pspReference"])["success"] for r in refunds] == [
        "true",
        "true",
        "false",
    ]
    assert event(items, "REFUND", refunds[0]["pspReference"])["originalReference"] == psp
    movements = sim.admin.movements()
    assert (movements["refunds"]["total"], movements["refunds"]["amount"]) == (2, {"EUR": 900})


def test_a_refund_of_an_uncaptured_payment_fails(
    checkout: Checkout, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000, manual=True))["pspReference"]
    refund = checkout.modify(psp, "refunds", amount_body(100))
    assert event(events(sink, 2), "REFUND", refund["pspReference"])["success"] == "false"


def test_a_refund_that_fails_later_sends_refund_failed(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000, method=card(holder="refund failed")))["pspReference"]
    checkout.modify(psp, "refunds", amount_body(500))
    items = events(sink, 3)
    assert event(items, "REFUND")["success"] == "true"
    assert event(items, "REFUND_FAILED")["success"] == "true"
    assert sim.admin.movements()["refunds"]["total"] == 0


def test_cancel_an_uncaptured_authorisation(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000, manual=True))["pspReference"]
    cancel = checkout.modify(psp, "cancels", {"merchantAccount": MERCHANT, "reference": "c1"})
    item = event(events(sink, 2), "CANCELLATION")
    assert (item["success"], item["pspReference"], item["originalReference"]) == (
        "true",
        cancel["pspReference"],
        psp,
    )
    late = checkout.modify(psp, "captures", amount_body(1000))
    assert event(events(sink, 3), "CAPTURE", late["pspReference"])["success"] == "false"


@pytest.mark.parametrize(("manual", "action"), [(True, "cancel"), (False, "refund")])
def test_a_reversal_cancels_or_refunds(
    checkout: Checkout, sink: NotificationSink, manual: bool, action: str
) -> None:
    psp = checkout.pay(payment(1000, manual=manual))["pspReference"]
    checkout.modify(psp, "reversals", {"merchantAccount": MERCHANT})
    item = event(events(sink, 2), "CANCEL_OR_REFUND")
    assert item["success"] == "true"
    assert item["additionalData"]["modification.action"] == action


def test_a_modification_of_an_unknown_payment_is_422(checkout: Checkout) -> None:
    response = checkout.post("/payments/ABCDEFGHIJKLMNOP/captures", amount_body(100))
    assert response.status_code == 422


# -- technical cancel -------------------------------------------------------------------------


def _technical_cancel(checkout: Checkout, reference: str) -> dict[str, Any]:
    response = checkout.post(
        "/cancels",
        {
            "merchantAccount": MERCHANT,
            "paymentReference": reference,
            "reference": "tc-" + reference,
        },
    )
    assert response.status_code == 201
    answer = dict(response.json())
    assert (answer["status"], answer["paymentReference"]) == ("received", reference)
    return answer


def test_a_technical_cancel_undoes_an_uncaptured_authorisation(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    body = payment(1000, manual=True)
    psp = checkout.pay(body)["pspReference"]
    cancel = _technical_cancel(checkout, body["reference"])
    item = event(events(sink, 2), "TECHNICAL_CANCEL")
    assert (item["success"], item["originalReference"], item["pspReference"]) == (
        "true",
        psp,
        cancel["pspReference"],
    )
    assert item["merchantReference"] == body["reference"]
    (state,) = sim.admin.payments(reference=body["reference"])
    assert state["status"] == "cancelled"
    assert sim.admin.movements()["cancels"]["total"] == 1


def test_a_technical_cancel_of_a_captured_payment_fails(
    checkout: Checkout, sink: NotificationSink
) -> None:
    body = payment(1000)  # auto-captured
    psp = checkout.pay(body)["pspReference"]
    _technical_cancel(checkout, body["reference"])
    item = event(events(sink, 2), "TECHNICAL_CANCEL")
    assert (item["success"], item["originalReference"]) == ("false", psp)


def test_a_technical_cancel_of_a_reference_never_paid_fails_without_original(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("payments:error_500_before:times=1")
    body = payment(1000, manual=True)
    assert checkout.post("/payments", body, key=str(uuid.uuid4())).status_code == 500
    _technical_cancel(checkout, body["reference"])
    item = event(events(sink, 1), "TECHNICAL_CANCEL")
    assert item["success"] == "false" and "originalReference" not in item
    assert sim.admin.movements()["authorisations"]["total"] == 0


# -- notifications: signature, retries, delivery faults ---------------------------------------


def test_every_notification_is_signed_with_the_configured_key(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    checkout.pay(payment())
    (item,) = events(sink, 1)
    assert verify_item(item, HMAC_KEY)
    assert not verify_item(item, "00" * 32)
    assert sink.headers()[0]["Content-Type"] == "application/json"
    sim.admin.configure_notifications(sink.url, ROTATED_KEY)
    checkout.pay(payment())
    second = events(sink, 2)[1]
    assert verify_item(second, ROTATED_KEY) and not verify_item(second, HMAC_KEY)


def test_a_refused_delivery_is_retried(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sink.fail_next(2)
    checkout.pay(payment())
    assert len(events(sink, 1)) == 1
    # The sink has the item before the sender logs the attempt that delivered it.
    deadline = time.monotonic() + 5
    while True:
        attempts = [(d["attempt"], d["outcome"]) for d in sim.admin.notification_deliveries()]
        if len(attempts) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert attempts == [(1, "failed"), (2, "failed"), (3, "delivered")]


def test_a_dropped_notification_never_arrives(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("notification:drop:times=1")
    first = checkout.pay(payment())
    second = checkout.pay(payment())
    (item,) = events(sink, 1)
    assert item["pspReference"] == second["pspReference"]
    time.sleep(0.3)
    assert len(sink.items()) == 1
    dropped = [d for d in sim.admin.notification_deliveries() if d["outcome"] == "dropped"]
    assert [d["pspReference"] for d in dropped] == [first["pspReference"]]
    assert len(sim.admin.notification_items()) == 2


def test_a_duplicated_notification_arrives_twice_identical(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("webhook:duplicate:times=1")
    checkout.pay(payment())
    one, two = events(sink, 2)
    assert one == two


def test_a_reordered_notification_arrives_after_its_successor(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("webhook:reorder:times=1")
    psp = checkout.pay(payment(1000, manual=True))["pspReference"]
    capture = checkout.modify(psp, "captures", amount_body(1000))
    items = events(sink, 2)
    assert [(i["eventCode"], i["pspReference"]) for i in items] == [
        ("CAPTURE", capture["pspReference"]),
        ("AUTHORISATION", psp),
    ]


def test_a_delayed_notification_is_overtaken(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.add_fault("webhook:delay:seconds=2:times=1")
    first = checkout.pay(payment())
    second = checkout.pay(payment())
    items = events(sink, 2)
    assert [i["pspReference"] for i in items] == [second["pspReference"], first["pspReference"]]


def test_notifications_stop_when_unconfigured(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    sim.admin.configure_notifications(None, None)
    checkout.pay(payment())
    time.sleep(0.2)
    assert sink.items() == []
    assert [i["eventCode"] for i in sim.admin.notification_items()] == ["AUTHORISATION"]


# -- outside the API: chargebacks and expiry ----------------------------------------------------


def test_a_chargeback_sends_its_notification_on_the_payment(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    psp = checkout.pay(payment(1000))["pspReference"]
    dispute = sim.admin.chargeback(psp, amount=600, reason_code="4853")
    item = event(events(sink, 2), "CHARGEBACK")
    assert (item["success"], item["originalReference"], item["pspReference"]) == (
        "true",
        psp,
        dispute["pspReference"],
    )
    assert item["amount"] == {"currency": "EUR", "value": 600}
    assert item["additionalData"]["chargebackReasonCode"] == "4853"
    assert sim.admin.movements()["chargebacks"]["amount"] == {"EUR": 600}


def test_an_uncaptured_payment_cannot_be_charged_back(
    checkout: Checkout, sim: RunningAdyenSimulator
) -> None:
    psp = checkout.pay(payment(1000, manual=True))["pspReference"]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        sim.admin.chargeback(psp)
    assert refused.value.response.status_code == 409


def test_an_uncaptured_authorisation_expires(
    checkout: Checkout, sim: RunningAdyenSimulator, sink: NotificationSink
) -> None:
    body = payment(1000, manual=True)
    psp = checkout.pay(body)["pspReference"]
    assert sim.admin.expire(psp)["status"] == "expired"
    item = event(events(sink, 2), "EXPIRE")
    assert (item["pspReference"], item["amount"]["value"]) == (psp, 1000)
    late = checkout.modify(psp, "captures", amount_body(1000))
    assert event(events(sink, 3), "CAPTURE", late["pspReference"])["success"] == "false"
