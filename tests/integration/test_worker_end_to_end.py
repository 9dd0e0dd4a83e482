"""The worker protocol in real worker processes: PostgreSQL, RabbitMQ, the simulator
(issue 4's acceptance).  Workers are killed and paused with real signals."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.harness.stack import Stack, running_stack, wait_for_output
from tests.support.processes import process_group


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(make_postgres_database(), make_broker_url()) as built:
        yield built


def start_worker_and_sweeper(stack: Stack, processes):
    """A worker with the sweeper beside it, as deployed.  Not optional on a busy machine:
    a task whose steps ran slowly stops starting provider calls that could outlive its
    soft time limit and hands the payment back to the row (``payment_deferred``), and
    only the sweeper dispatches it again; a test with a worker alone would then wait for
    ever for a payment the protocol rightly put aside."""
    stack.start_sweeper(processes)
    return stack.start_worker(processes)


def confirms(requests: list[dict]) -> list[dict]:
    return [r for r in requests if r["operation"] == "confirm"]


def test_happy_path_succeeds_with_one_money_movement_and_a_balanced_ledger(stack, processes):
    start_worker_and_sweeper(stack, processes)
    accepted = stack.pay("e2e-happy", amount=4200)
    assert accepted["status"] == "processing"

    final = stack.wait_final(accepted["id"])

    assert final["status"] == "succeeded"
    assert final["provider_payment_id"].startswith("pi_")
    assert stack.movements(accepted["id"]) == 1
    assert stack.outcome_rows(accepted["id"]) == 1
    assert stack.ledger_lines(accepted["id"]) == 2
    assert stack.ledger_sum(accepted["id"]) == 0
    replay = stack.pay("e2e-happy", amount=4200)
    assert replay == final


def test_a_decline_fails_with_the_decline_code_and_moves_no_money(stack, processes):
    start_worker_and_sweeper(stack, processes)
    accepted = stack.pay("e2e-decline", payment_method="pm_card_chargeDeclinedInsufficientFunds")

    final = stack.wait_final(accepted["id"])

    assert final["status"] == "failed"
    assert final["failure"]["code"] == "card_declined"
    assert final["failure"]["decline_code"] == "insufficient_funds"
    assert stack.movements(accepted["id"]) == 0
    assert stack.ledger_lines(accepted["id"]) == 0


def test_after_a_confirm_timeout_the_next_request_for_the_intent_is_a_status_query(
    stack, processes
):
    stack.simulator.admin.add_fault("confirm:timeout_after_effect:amounts=1301:times=1")
    start_worker_and_sweeper(stack, processes)
    accepted = stack.pay("e2e-timeout", amount=1301)

    final = stack.wait_final(accepted["id"])

    assert final["status"] == "succeeded"
    requests = stack.provider_requests(accepted["id"])
    [timed_out] = [r for r in requests if r["fault"] == "timeout_after_effect"]
    after = [r for r in requests if r["seq"] > timed_out["seq"]]
    assert after and after[0]["method"] == "GET", requests
    assert len(confirms(requests)) == 1
    assert stack.movements(accepted["id"]) == 1


def test_a_saved_500_after_the_effect_is_queried_not_replayed_in_a_loop(stack, processes):
    stack.simulator.admin.add_fault("confirm:error_500_after:amounts=1302:times=1")
    start_worker_and_sweeper(stack, processes)
    accepted = stack.pay("e2e-500", amount=1302)

    final = stack.wait_final(accepted["id"])

    assert final["status"] == "succeeded"
    requests = stack.provider_requests(accepted["id"])
    assert [r["status"] for r in confirms(requests)] == [500]
    assert any(r["method"] == "GET" for r in requests)
    assert stack.movements(accepted["id"]) == 1


def test_a_429_with_retry_after_delays_the_next_attempt_by_at_least_that(stack, processes):
    stack.simulator.admin.add_fault("confirm:rate_limit:amounts=1303:times=1:retry_after=2")
    start_worker_and_sweeper(stack, processes)  # a wait beyond the task's budget is the row's
    accepted = stack.pay("e2e-429", amount=1303)

    final = stack.wait_final(accepted["id"])

    assert final["status"] == "succeeded"
    requests = stack.provider_requests(accepted["id"])
    [limited] = [r for r in requests if r["status"] == 429]
    following = [r for r in requests if r["seq"] > limited["seq"]]
    assert following
    assert following[0]["at"] - limited["at"] >= 2.0
    assert stack.movements(accepted["id"]) == 1


def test_a_zombie_worker_resumed_after_takeover_is_fenced_out(stack, processes):
    # The confirm of this payment takes 3 s at the provider: long enough to freeze the
    # worker while its request is in flight.
    stack.simulator.admin.add_fault("confirm:latency:amounts=1304:seconds=3:times=1")
    # The default worker (threads-pool processes under a supervisor, one process group)
    # models a frozen VM or GC pause: SIGSTOP to the group stops everything in it, and no pool
    # parent stays awake to kill a stuck task at a time limit (prefork's would; see the
    # docs/decisions/0025-zombie-test.md).
    zombie = stack.start_worker(processes, name="zombie")
    stack.start_sweeper(processes)
    accepted = stack.pay("e2e-zombie", amount=1304)
    payment_id = accepted["id"]
    stack.wait_for_record(payment_id, lambda r: r.confirm_attempts == 1, timeout=30)
    owner = stack.record(payment_id).lease_owner
    assert owner is not None
    assert int(owner.rsplit(":", 1)[-1]) in process_group(zombie.pid)
    zombie.pause()
    try:
        rescuer = stack.start_worker(processes, name="rescuer")
        final = stack.wait_final(payment_id, timeout=60)
        assert final["status"] == "succeeded"
        assert stack.record(payment_id).lease_owner is None
    finally:
        zombie.resume()
    wait_for_output(zombie, "fenced_out", timeout=30)

    assert stack.movements(payment_id) == 1
    assert stack.outcome_rows(payment_id) == 1
    assert stack.ledger_sum(payment_id) == 0
    assert rescuer.poll() is None
    assert stack.payment(payment_id) == final


def test_a_worker_killed_after_the_provider_charged_is_recovered_exactly_once(stack, processes):
    # The provider charges, then holds its answer back: the worker dies in that window.
    stack.simulator.admin.add_fault("confirm:timeout_after_effect:amounts=1305:times=1")
    victim = stack.start_worker(processes, name="victim")
    accepted = stack.pay("e2e-kill", amount=1305)
    payment_id = accepted["id"]

    def charged() -> bool:
        return stack.movements(payment_id) == 1

    _wait(charged, timeout=30)
    victim.kill()
    assert stack.record(payment_id).status.value == "processing"
    assert stack.outcome_rows(payment_id) == 0

    stack.start_sweeper(processes)
    stack.start_worker(processes, name="survivor")
    final = stack.wait_final(payment_id, timeout=60)

    assert final["status"] == "succeeded"
    assert stack.movements(payment_id) == 1
    assert stack.outcome_rows(payment_id) == 1
    assert len(confirms(stack.provider_requests(payment_id))) == 1
    assert stack.record(payment_id).attempts >= 2


def test_a_payment_accepted_with_no_worker_running_is_processed_when_one_starts(stack, processes):
    accepted = stack.pay("e2e-late-worker")
    assert stack.payment(accepted["id"])["status"] == "processing"

    start_worker_and_sweeper(stack, processes)

    assert stack.wait_final(accepted["id"])["status"] == "succeeded"
    assert stack.movements(accepted["id"]) == 1


def _wait(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)
