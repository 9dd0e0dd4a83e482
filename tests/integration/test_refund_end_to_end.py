"""Refunds in real worker processes: PostgreSQL, RabbitMQ, the simulator.  Workers holding
a refund are killed and paused with real signals (issue 11's acceptance)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.harness.stack import Stack, running_stack, wait_for_output


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(make_postgres_database(), make_broker_url()) as built:
        yield built


def paid(stack: Stack, key: str, amount: int) -> str:
    accepted = stack.pay(key, amount=amount)
    assert stack.wait_final(accepted["id"])["status"] == "succeeded"
    return str(accepted["id"])


def test_a_worker_killed_right_after_the_provider_refunded_leaves_one_refund_that_succeeds(
    stack, processes
):
    victim = stack.start_worker(processes, name="victim")
    stack.start_sweeper(processes)
    payment_id = paid(stack, "e2e-refund-kill", 2000)
    # The provider refunds, then holds its answer back: the worker dies in that window.
    stack.simulator.admin.add_fault("refund:timeout_after_effect:amounts=701:times=1")
    refund_id = stack.refund(payment_id, "refund-kill", amount=701)["id"]

    _wait(lambda: stack.refunds_at_provider(refund_id) == 1, timeout=30)
    victim.kill()
    assert stack.refund_state(refund_id)["status"] == "processing"

    stack.start_worker(processes, name="survivor")
    final = stack.wait_refund_final(refund_id, timeout=60)

    assert final["status"] == "succeeded"
    assert stack.refunds_at_provider(refund_id) == 1
    assert stack.operation(refund_id).attempts >= 2
    record = stack.record(payment_id)
    assert (record.amount_refunded, record.amount_refund_reserved) == (701, 701)
    assert stack.ledger_sum(payment_id) == 0


def test_a_paused_worker_holding_a_refund_is_taken_over_and_fenced_out(stack, processes):
    # The refund takes 3 s at the provider: long enough to freeze the worker mid-request.
    stack.simulator.admin.add_fault("refund:latency:amounts=702:seconds=3:times=1")
    # A solo worker models a frozen VM: nothing in it runs while stopped.
    zombie = stack.start_worker(processes, name="zombie", pool="solo")
    stack.start_sweeper(processes)
    payment_id = paid(stack, "e2e-refund-zombie", 2000)
    refund_id = stack.refund(payment_id, "refund-zombie", amount=702)["id"]
    stack.wait_for_operation(refund_id, lambda r: r.step_attempts == 1, timeout=30)
    assert (stack.operation(refund_id).lease_owner or "").endswith(f":{zombie.pid}")
    zombie.pause()
    try:
        stack.start_worker(processes, name="rescuer")
        final = stack.wait_refund_final(refund_id, timeout=60)
        assert final["status"] == "succeeded"
    finally:
        zombie.resume()
    wait_for_output(zombie, "fenced_out", timeout=30)

    assert stack.refunds_at_provider(refund_id) == 1
    assert stack.record(payment_id).amount_refunded == 702
    assert stack.refund_state(refund_id) == final


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)
