"""The ops console in a real browser against the real system (issue 15's acceptance):
PostgreSQL, RabbitMQ, the provider simulator, real ``payorch worker`` processes frozen with
SIGSTOP, and Debian's Chromium.  An operator signs in, finds the stuck payment, takes it
over with a reason, and watches it succeed next to the audit row; then retries a parked
payment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.seeds import force
from tests.harness.stack import Stack, running_stack, wait_for_output


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(make_postgres_database(), make_broker_url()) as built:
        yield built


def _pay(stack: Stack, key: str, amount: int, description: str) -> str:
    body = {
        "amount": amount,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "description": description,
        "customer_reference": "cus-console",
    }
    with stack.client() as client:
        response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.text
    payment_id: str = response.json()["id"]
    return payment_id


def test_an_operator_takes_over_a_payment_stuck_behind_a_frozen_worker(
    stack, processes, open_console
):
    # The confirm takes 3 s at the provider: the worker is frozen with its call in flight.
    stack.simulator.admin.add_fault("confirm:latency:amounts=1501:seconds=3:times=1")
    # --pool solo: SIGSTOP freezes everything in the worker (a frozen VM), time limits too.
    zombie = stack.start_worker(processes, name="zombie", pool="solo")
    payment_id = _pay(stack, "console-zombie", 1501, "<script>alert('x')</script> order 1501")
    stack.wait_for_record(payment_id, lambda r: r.confirm_attempts == 1, timeout=30)
    zombie.pause()
    try:
        # No sweeper runs: the operator is the one who unsticks it.
        stack.start_worker(processes, name="rescuer")
        console = open_console(stack.api_url)
        console.sign_in(stack.ops_key)

        # The lease (6 s) runs out while the worker stays frozen: the queue shows it.
        row = console.wait_for_row("expired", payment_id, timeout=40)
        assert f":{zombie.pid}" in row.inner_text()  # the frozen worker still owns it
        token_before = stack.record(payment_id).lease_token
        console.act_on_row(row, "worker host frozen (browser test)", "Take over")

        done = console.text("#action-done")
        assert "takeover" in done and "worker host frozen (browser test)" in done
        audit_row = console.page.locator("#audit tr.highlight")
        assert "worker host frozen (browser test)" in audit_row.inner_text()
        assert f"{token_before} → {token_before + 1}" in audit_row.inner_text()

        console.wait_until(
            f"/ops/payments/{payment_id}",
            lambda: console.text("#payment-status") == "succeeded",
            timeout=60,
            what="the payment succeeds after the takeover",
        )
        # The audit row is still there on the finished payment, and the description is text.
        assert "worker host frozen (browser test)" in console.text("#audit")
        assert console.text("#description").startswith("<script>alert('x')</script>")
        timeline = console.text("#timeline")
        assert "Lease taken over" in timeline and "Finished" in timeline
        # The frozen worker's confirm is still in flight: a call is recorded when it returns.
        assert "GET /v1/payment_intents/" in console.text("#provider-calls")  # query first
        assert console.foreign_requests == []
    finally:
        zombie.resume()
    wait_for_output(zombie, "fenced_out", timeout=30)
    assert stack.movements(payment_id) == 1
    assert stack.outcome_rows(payment_id) == 1
    # Once it returned, the zombie's confirm is on the payment page too, with its key.
    console.open(f"/ops/payments/{payment_id}")
    assert f"payorch-{payment_id}-confirm-1" in console.text("#provider-calls")


def test_an_operator_retries_a_needs_attention_payment(stack, processes, open_console):
    # Accepted while no worker runs, then parked the way the worker parks a payment.
    payment_id = _pay(stack, "console-parked", 1502, "parked order")
    force(
        stack.container,
        payment_id,
        status="needs_attention",
        lease_owner=None,
        locked_until=None,
        last_error="provider answered 500 six times (browser test)",
    )
    stack.start_worker(processes, name="worker")
    console = open_console(stack.api_url)
    console.sign_in(stack.ops_key)

    row = console.wait_for_row("needs-attention", payment_id, timeout=10)
    assert "provider answered 500 six times" in row.inner_text()
    console.act_on_row(row, "provider incident over (browser test)", "Retry")
    assert "retry" in console.text("#action-done")

    console.wait_until(
        f"/ops/payments/{payment_id}",
        lambda: console.text("#payment-status") == "succeeded",
        timeout=60,
        what="the retried payment succeeds",
    )
    assert "provider incident over (browser test)" in console.text("#audit")
    assert "Retried by an operator" in console.text("#timeline")
    assert stack.movements(payment_id) == 1
