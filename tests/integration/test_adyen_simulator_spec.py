"""The Adyen simulator speaks Adyen's published shapes: a representative session touches
every Checkout path it serves (success and error answers) and every notification it makes,
and each request, answer and notification validates against the Checkout v71 and
notification subsets copied into ``tests/fixtures/adyen`` (Draft 2020-12, Adyen's
``additionalProperties: false`` included)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    RunningAdyenSimulator,
    start_in_thread,
)
from orchestrator.providers.adyen_hmac import signed_item
from tests.integration.adyen_simulator_helpers import (
    HMAC_KEY,
    MERCHANT,
    Checkout,
    amount_body,
    card,
    payment,
)
from tests.replay.adyen_schema import (
    AdyenWatch,
    notification_errors,
    request_errors,
    response_errors,
)

ALL_EVENTS = {
    "AUTHORISATION",
    "CAPTURE",
    "CAPTURE_FAILED",
    "CANCELLATION",
    "TECHNICAL_CANCEL",
    "REFUND",
    "REFUND_FAILED",
    "CANCEL_OR_REFUND",
    "CHARGEBACK",
    "EXPIRE",
}


@pytest.fixture(scope="module")
def session() -> Iterator[tuple[RunningAdyenSimulator, AdyenWatch]]:
    watch = AdyenWatch()
    with start_in_thread(
        AdyenSimulatorConfig(answer_observer=watch, merchant_accounts=(MERCHANT,))
    ) as simulator:
        _representative_session(simulator)
        yield simulator, watch


def _representative_session(sim: RunningAdyenSimulator) -> None:
    client = Checkout(sim.checkout_url)
    try:
        # Payments: authorised (auto and manual capture), refused, error, pending, stored.
        auto = client.pay(payment(1000), key=str(uuid.uuid4()))["pspReference"]
        manual_body = payment(1000, manual=True)
        manual = client.pay(manual_body)["pspReference"]
        client.pay(payment(method=card(holder="DECLINED")))
        client.pay(payment(method=card(holder="ERROR")))
        client.pay(payment(method=card(holder="PENDING")))
        client.pay(
            payment(
                method={"type": "scheme", "storedPaymentMethodId": "8415698462516992"},
                shopperReference="shopper_1",
                recurringProcessingModel="Subscription",
                shopperInteraction="ContAuth",
            )
        )
        # 3-D Secure: challenge, then details (pass and fail).
        for succeed in (True, False):
            action = client.pay(payment(method=card("5454545454545454")))["action"]
            result = sim.admin.three_ds_result(succeed=succeed)
            body = {"details": {"threeDSResult": result}, "paymentData": action["paymentData"]}
            assert client.post("/payments/details", body).status_code == 200
        # Modifications, with their failures and late failures.
        client.modify(manual, "captures", amount_body(400))
        client.modify(manual, "captures", amount_body(100))  # closed: success false
        client.modify(auto, "refunds", amount_body(300))
        client.modify(auto, "refunds", amount_body(900))  # over the captured sum
        client.modify(auto, "reversals", {"merchantAccount": MERCHANT})
        cancel_me = client.pay(payment(500, manual=True))["pspReference"]
        client.modify(cancel_me, "cancels", {"merchantAccount": MERCHANT})
        late = client.pay(payment(700, manual=True, method=card(holder="capture failed")))
        client.modify(late["pspReference"], "captures", amount_body(700))
        late_refund = client.pay(payment(700, method=card(holder="refund failed")))
        client.modify(late_refund["pspReference"], "refunds", amount_body(700))
        sim.admin.chargeback(late_refund["pspReference"], amount=100)
        sim.admin.expire(client.pay(payment(900, manual=True))["pspReference"])
        uncaptured = payment(800, manual=True)
        client.pay(uncaptured)
        for reference in (uncaptured["reference"], "never-paid"):
            answer = client.post(
                "/cancels",
                {"merchantAccount": MERCHANT, "paymentReference": reference, "reference": "tc"},
            )
            assert answer.status_code == 201
        # Errors: 401, 400, 422 (Adyen's and the idempotency 704), 500, 404.
        assert (
            httpx.post(f"{sim.checkout_url}/payments", json={}, trust_env=False).status_code == 401
        )
        assert client.post("/payments", {"reference": "x"}).status_code == 400
        assert client.post("/payments", payment(method=card("4111111111111112"))).status_code == 422
        sim.admin.add_fault("payments:latency:seconds=0.5:times=1")
        key = str(uuid.uuid4())
        slow = threading.Thread(target=lambda: client.post("/payments", payment(), key=key))
        slow.start()
        deadline = time.monotonic() + 5
        while not any(r["idempotency_key"] == key for r in sim.admin.requests()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        twin = client.post("/payments", payment(), key=key)
        slow.join()
        assert twin.status_code == 422, twin.text
        sim.admin.add_fault("capture:error_500_before:times=1")
        assert client.post(f"/payments/{manual}/captures", amount_body(1)).status_code == 500
        assert client.post("/payments/NOPE/captures", amount_body(1)).status_code == 422
        other = {**payment(), "merchantAccount": "SomeoneElse"}
        assert client.post("/payments", other).status_code == 403
        sim.admin.add_fault("refund:rate_limit:times=1:retry_after=2")
        limited = client.post(f"/payments/{auto}/refunds", amount_body(1))
        assert (limited.status_code, limited.headers["Retry-After"]) == (429, "2")
    finally:
        client.close()


def test_every_answer_and_accepted_request_validates_against_checkout_v71(
    session: tuple[RunningAdyenSimulator, AdyenWatch],
) -> None:
    _, watch = session
    watch.assert_clean()
    assert {
        ("/payments", 200),
        ("/payments/details", 200),
        ("/payments/{psp}/captures", 201),
        ("/payments/{psp}/cancels", 201),
        ("/payments/{psp}/refunds", 201),
        ("/payments/{psp}/reversals", 201),
        ("/cancels", 201),
        ("/payments", 401),
        ("/payments", 400),
        ("/payments", 422),
        ("/payments/{psp}/captures", 500),
        ("/payments/{psp}/captures", 422),
        ("/payments", 403),
        ("/payments/{psp}/refunds", 429),
    } <= watch.statuses


def test_every_notification_validates_against_its_event_schema(
    session: tuple[RunningAdyenSimulator, AdyenWatch],
) -> None:
    simulator, _ = session
    items = simulator.admin.notification_items()
    assert {i["eventCode"] for i in items} == ALL_EVENTS
    assert {i["success"] for i in items} == {"true", "false"}
    for item in items:
        body = {
            "live": "false",
            "notificationItems": [{"NotificationRequestItem": signed_item(item, HMAC_KEY)}],
        }
        assert notification_errors(body) == [], item


def test_the_validators_are_not_vacuous() -> None:
    assert response_errors("/v71/payments", 200, {"resultCode": "Authorised", "bogus": 1})
    assert response_errors("/v71/payments/ABC/captures", 201, {"status": "received"})
    assert request_errors("/v71/cancels", {"merchantAccount": MERCHANT})
    bad = {
        "live": "false",
        "notificationItems": [
            {
                "NotificationRequestItem": {
                    "eventCode": "CAPTURE",
                    "success": True,
                    "additionalData": {"not.a.field": "x"},
                }
            }
        ],
    }
    assert notification_errors(bad)
