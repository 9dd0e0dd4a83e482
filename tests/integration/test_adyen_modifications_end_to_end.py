"""Adyen's asynchronous modifications in real worker processes: PostgreSQL, RabbitMQ, a
worker and a sweeper, the API, and the Adyen simulator delivering its signed notifications
to the API (every one twice).  A manual-capture EUR payment is captured in part and refunded
in part; each step waits on Adyen's ``received`` and is settled by its notification, woken
by it rather than by the re-check (decision 0072)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from tests.harness.stack import Stack, running_stack
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.replay.adyen_schema import AdyenWatch


@pytest.fixture
def adyen() -> Iterator[RunningAdyenSimulator]:
    watch = AdyenWatch()
    with start_in_thread(AdyenSimulatorConfig(answer_observer=watch)) as simulator:
        yield simulator
    watch.assert_clean()


def eventually(value: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        seen = value()
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout}s: {seen!r}")
        time.sleep(0.2)


def adyen_account(stack: Stack, adyen: RunningAdyenSimulator) -> str:
    with stack.client() as client:
        created = client.post(
            "/v1/connector_accounts",
            json={
                "name": "Adyen EU",
                "provider": "adyen",
                "credentials": {
                    "api_key": API_KEY,
                    "merchant_account": MERCHANT,
                    "hmac_key": HMAC_KEY,
                },
            },
        )
    assert created.status_code == 201, created.text
    account = str(created.json()["id"])
    adyen.admin.configure_notifications(
        f"{stack.api_url}/v1/providers/adyen/notifications/{account}", HMAC_KEY
    )
    return account


def test_a_partial_capture_and_a_partial_refund_settle_by_notification_in_worker_processes(
    make_postgres_database, make_broker_url, processes, adyen: RunningAdyenSimulator
) -> None:
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        adyen_api_base=adyen.url,
        # Far longer than the test: only the notification's wake-up can settle a step in time.
        processing_recheck_seconds=3600,
    ) as stack:
        account = adyen_account(stack, adyen)
        adyen.admin.add_fault("webhook:duplicate")
        stack.start_worker(processes)
        stack.start_sweeper(processes)

        paid = stack.pay(
            "adyen-e2e",
            amount=4200,
            currency="eur",
            payment_method="8415718415172200",
            customer="cus_ada",
            return_url="https://shop.example/return",
            capture_method="manual",
            connector_account=account,
        )
        payment_id = paid["id"]
        eventually(lambda: stack.payment(payment_id)["status"], lambda s: s == "requires_capture")
        with stack.client() as client:
            capture = client.post(
                f"/v1/payments/{payment_id}/capture",
                json={"amount": 1500},
                headers={"Idempotency-Key": "cap-1"},
            )
        assert capture.status_code == 202, capture.text
        captured = eventually(
            lambda: stack.payment(payment_id), lambda p: p["status"] != "requires_capture"
        )
        refund = stack.refund(payment_id, "rfd-1", amount=500)
        refunded = stack.wait_refund_final(refund["id"])

        assert (captured["status"], captured["amount_captured"]) == ("succeeded", 1500)
        assert refunded["status"] == "succeeded"
        moved = adyen.admin.movements()
        assert (moved["captures"]["total"], moved["captures"]["amount"]) == (1, {"EUR": 1500})
        assert (moved["refunds"]["total"], moved["refunds"]["amount"]) == (1, {"EUR": 500})
        assert stack.ledger_sum(payment_id) == 0
        final = stack.payment(payment_id)
        assert (final["amount_captured"], final["amount_refunded"]) == (1500, 500)
