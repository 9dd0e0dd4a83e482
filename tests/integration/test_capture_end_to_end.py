"""Capture and cancel in real worker processes: PostgreSQL, RabbitMQ, the simulator.  The
provider captures (or cancels) and then holds its answer back past the worker's timeout:
the worker reads the intent first and never sends a second capture (issue 11's acceptance)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.stack import Stack, running_stack


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(make_postgres_database(), make_broker_url()) as built:
        yield built


def wait_status(
    stack: Stack, payment_id: str, status: str, timeout: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        payment = stack.payment(payment_id)
        if payment["status"] == status:
            return payment
        if time.monotonic() > deadline:
            raise AssertionError(
                f"payment {payment_id} not {status} after {timeout}s: {payment}\n"
                f"record: {stack.record(payment_id)}"
            )
        time.sleep(0.2)


def authorized(stack: Stack, key: str, amount: int) -> str:
    accepted = stack.pay(key, amount=amount, capture_method="manual")
    wait_status(stack, accepted["id"], "requires_capture")
    return str(accepted["id"])


def post(stack: Stack, payment_id: str, action: str, key: str, body: dict[str, Any]) -> Any:
    with stack.client() as client:
        response = client.post(
            f"/v1/payments/{payment_id}/{action}", json=body, headers={"Idempotency-Key": key}
        )
    assert response.status_code == 202, response.text
    assert response.headers["Location"] == f"/v1/payments/{payment_id}"
    return response.json()


def calls(stack: Stack, payment_id: str, operation: str) -> list[str | None]:
    return [
        r["idempotency_key"]
        for r in stack.provider_requests(payment_id)
        if r["operation"] == operation
    ]


def test_a_capture_whose_answer_is_lost_after_the_provider_captured_is_read_and_captured_once(
    stack, processes
):
    stack.start_worker(processes)
    stack.start_sweeper(processes)
    payment_id = authorized(stack, "e2e-capture", 1301)
    # The provider captures, then holds the answer back past the worker's timeout.
    stack.simulator.admin.add_fault("capture:timeout_after_effect:amounts=1301:times=1")

    accepted = post(stack, payment_id, "capture", "capture-1", {"amount": 1000})
    assert accepted["status"] == "requires_capture"
    final = wait_status(stack, payment_id, "succeeded")

    assert (final["amount_captured"], final["amount_capturable"]) == (1000, 0)
    captures = stack.simulator.admin.movements()["captures"]["by_record"]
    assert captures == {payment_id: 1}
    [capture_key] = calls(stack, payment_id, "capture")  # one capture sent, ever
    assert capture_key is not None and capture_key.endswith("-capture-1")
    operation_id = capture_key.removeprefix("payorch-").removesuffix("-capture-1")
    operation = stack.operation(operation_id)
    assert (operation.status.value, operation.unknown_outcomes) == ("succeeded", 1)
    assert stack.ledger_sum(payment_id) == 0
    assert stack.record(payment_id).amount_captured == 1000


def test_a_cancel_whose_answer_is_lost_after_the_provider_canceled_is_read_and_sent_once(
    stack, processes
):
    stack.start_worker(processes)
    stack.start_sweeper(processes)
    payment_id = authorized(stack, "e2e-cancel", 1302)
    stack.simulator.admin.add_fault("cancel:timeout_after_effect:amounts=1302:times=1")

    post(stack, payment_id, "cancel", "cancel-1", {"reason": "requested_by_customer"})
    final = wait_status(stack, payment_id, "canceled")

    assert final["amount_capturable"] == 0 and final["failure"]["code"] == "canceled"
    assert len(calls(stack, payment_id, "cancel")) == 1
    assert stack.simulator.admin.movements()["captures"]["by_record"] == {}
    assert stack.ledger_sum(payment_id) == 0


SECRET = "whsec_payorch_capture_e2e"
WEBHOOK_PATH = "/v1/providers/stripe/webhooks"


def test_an_authorisation_the_provider_expires_ends_the_payment_canceled(
    make_postgres_database, make_broker_url, processes
):
    with running_stack(
        make_postgres_database(), make_broker_url(), stripe_webhook_secret=SECRET
    ) as stack:
        stack.simulator.admin.configure_webhooks(stack.api_url + WEBHOOK_PATH, SECRET)
        stack.start_worker(processes)
        stack.start_sweeper(processes)
        payment_id = authorized(stack, "e2e-expiry", 1303)
        provider_payment_id = stack.record(payment_id).provider_payment_id
        assert provider_payment_id is not None

        # Stripe cancels an authorisation left uncaptured for 7 days; its event arrives.
        stack.simulator.admin.expire_authorization(provider_payment_id)
        final = wait_status(stack, payment_id, "canceled")

        assert final["amount_capturable"] == 0 and final["failure"]["code"] == "canceled"
        assert calls(stack, payment_id, "cancel") == []  # read, never sent by payorch
        assert stack.ledger_sum(payment_id) == 0


def wait_operation(stack: Stack, path: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        with stack.client() as client:
            response = client.get(path)
        assert response.status_code == 200, response.text
        operation: dict[str, Any] = response.json()
        if operation["status"] != "processing":
            return operation
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} still processing after {timeout}s: {operation}")
        time.sleep(0.2)


def test_a_capture_the_provider_refuses_fails_with_its_reason_and_the_authorisation_stands(
    stack, processes
):
    stack.start_worker(processes)
    stack.start_sweeper(processes)
    payment_id = authorized(stack, "e2e-refused", 1304)

    # Under the provider's minimum charge: refused (400 amount_too_small), nothing captured.
    with stack.client() as client:
        response = client.post(
            f"/v1/payments/{payment_id}/capture",
            json={"amount": 10},
            headers={"Idempotency-Key": "capture-small"},
        )
    assert response.status_code == 202, response.text
    capture_id = response.headers["Operation-Id"]
    operation = wait_operation(stack, f"/v1/captures/{capture_id}")

    assert operation["status"] == "failed"
    assert operation["failure"]["code"] == "amount_too_small"
    assert "at least 50" in operation["failure"]["message"]
    payment = stack.payment(payment_id)
    assert (payment["status"], payment["amount_capturable"]) == ("requires_capture", 1304)
    assert stack.simulator.admin.movements()["captures"]["by_record"] == {}
    with stack.client() as client:
        events = client.get("/v1/events", params={"type": "payment.capture_failed"}).json()
    with stack.client(stack.ops_key) as ops:
        detail = ops.get(f"/v1/ops/payments/{payment_id}").json()
    [event] = [e for e in events["data"] if e["data"]["object"]["payment_id"] == payment_id]
    assert event["data"]["object"]["id"] == capture_id
    assert event["data"]["object"]["failure"]["code"] == "amount_too_small"
    [shown] = [op for op in detail["operations"] if op.get("operation_id") == capture_id]
    assert (shown["status"], shown["failure_code"]) == ("failed", "amount_too_small")

    # The authorisation stands: a capture of all of it (a new key) succeeds, once.
    post(stack, payment_id, "capture", "capture-all", {})
    final = wait_status(stack, payment_id, "succeeded")
    assert final["amount_captured"] == 1304
    assert stack.simulator.admin.movements()["captures"]["by_record"] == {payment_id: 1}
    assert stack.ledger_sum(payment_id) == 0
