"""Provider truth in real worker processes (issue 10's acceptance): PostgreSQL, RabbitMQ,
``payorch worker`` / ``payorch sweeper`` subprocesses, the simulator with decoy intents.

Decoys are seeded straight into the simulator's store (it runs in this process), in bulk:
they stand for other integrations on the same Stripe account and for a busy account."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from orchestrator.providers.keys import RECORD_ID_METADATA_KEY
from tests.harness.stack import Stack, running_stack


@pytest.fixture
def make_stack(make_postgres_database, make_broker_url) -> Iterator[Callable[..., Stack]]:
    stacks: list[Any] = []

    def build(**overrides: Any) -> Stack:
        context = running_stack(make_postgres_database(), make_broker_url(), **overrides)
        stacks.append(context)
        return context.__enter__()

    yield build
    for context in reversed(stacks):
        context.__exit__(None, None, None)


def wait_status(stack: Stack, payment_id: str, status: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        payment = stack.payment(payment_id)
        if payment["status"] == status:
            return payment
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{payment_id} not {status}: {payment}, {stack.record(payment_id)}"
            )
        time.sleep(0.2)


def list_requests(stack: Stack) -> list[dict]:
    return [r for r in stack.simulator.admin.requests() if r["operation"] == "list"]


def confirms_of(stack: Stack, provider_payment_id: str) -> list[dict]:
    requests = stack.simulator.admin.requests(intent_id=provider_payment_id)
    return [r for r in requests if r["operation"] == "confirm"]


def test_a_foreign_intent_with_another_amount_is_never_confirmed_and_the_payment_parks(
    make_stack, processes
):
    stack = make_stack()
    # Our create never lands (a 500 before any effect, every time) ...
    stack.simulator.admin.add_fault("create:error_500_before:amounts=23001")
    accepted = stack.pay("truth-foreign", amount=23001)
    payment_id = accepted["id"]
    # ... and someone else's intent names our record, for another amount.
    foreign = stack.simulator.simulator.seed_intent(
        amount=523001,
        metadata={RECORD_ID_METADATA_KEY: payment_id},
        created=int(time.time()) - 30,
    )
    stack.start_sweeper(processes)  # backoffs between the re-sent creates live in the row
    stack.start_worker(processes)

    parked = wait_status(stack, payment_id, "needs_attention", timeout=90)

    record = stack.record(payment_id)
    assert foreign in (record.last_error or "")
    assert "amount 523001 != 23001" in (record.last_error or "")
    assert [r["id"] for r in record.rejected_intents] == [foreign]
    assert record.unknown_outcomes >= 6  # MAX_ATTEMPTS re-sends of the same key, then parked
    assert confirms_of(stack, foreign) == []
    assert stack.simulator.admin.movements()["total"] == 0
    assert stack.ledger_lines(payment_id) == 0
    assert parked["provider_payment_id"] is None


def test_our_intent_beside_an_older_foreign_one_is_confirmed_once_at_the_right_amount(
    make_stack, processes
):
    stack = make_stack()
    # Our create lands, but its answer is lost (the worker times out) ...
    stack.simulator.admin.add_fault("create:timeout_after_effect:amounts=23002:times=1")
    accepted = stack.pay("truth-beside", amount=23002)
    payment_id = accepted["id"]
    # ... beside an older intent of someone else's that names our record.
    foreign = stack.simulator.simulator.seed_intent(
        amount=523002,
        metadata={RECORD_ID_METADATA_KEY: payment_id},
        created=int(time.time()) - 60,
    )
    stack.start_sweeper(processes)  # a lookup that does not fit the task's budget is deferred
    stack.start_worker(processes)

    final = stack.wait_final(payment_id)

    assert final["status"] == "succeeded"
    assert final["provider_payment_id"] != foreign
    movements = stack.simulator.admin.movements()
    assert movements["total"] == 1
    [charge] = movements["charges"]
    assert (charge["payment_intent"], charge["amount"]) == (final["provider_payment_id"], 23002)
    assert confirms_of(stack, foreign) == []
    assert stack.ledger_lines(payment_id) == 2 and stack.ledger_sum(payment_id) == 0
    assert stack.record(payment_id).settled_amount == 23002


def test_a_lost_create_on_a_busy_account_resolves_within_max_attempts_with_one_charge(
    make_stack, processes
):
    # A task may page for 12 s (soft limit 0.6 x 20 s) and reads 40 pages before handing
    # the rest to the next attempt: 10,000 newer intents = 100 pages = three attempts.
    stack = make_stack(lease_seconds=20.0, dispatch_lease_seconds=20.0, lookup_pages_per_attempt=40)
    stack.simulator.admin.add_fault("create:timeout_after_effect:amounts=23003:times=1")
    stack.simulator.admin.add_fault("list:latency:seconds=0.1")  # 100 ms per page
    accepted = stack.pay("truth-busy", amount=23003)
    payment_id = accepted["id"]
    # 10,000 intents newer than ours (created from two minutes on: inside the lookup's
    # margin, so every one of them is in the window and must be paged through).
    stack.simulator.simulator.seed_intents(
        10_000, created_from=int(time.time()) + 120, created_step=0.01
    )
    stack.start_sweeper(processes)
    stack.start_worker(processes)
    started = time.monotonic()

    final = stack.wait_final(payment_id, timeout=120)

    assert final["status"] == "succeeded"
    assert stack.movements(payment_id) == 1
    record = stack.record(payment_id)
    assert record.attempts <= 6  # MAX_ATTEMPTS of the end-to-end settings
    pages = list_requests(stack)
    assert len(pages) >= 100  # it really paged through the busy window ...
    assert all(p["duration_ms"] >= 100 for p in pages)  # ... at 100 ms a page
    assert len(pages) <= 102  # ... and never started over
    assert record.attempts >= 3  # the page budget split the scan across attempts
    assert time.monotonic() - started < 110


def test_a_lookup_killed_mid_scan_resumes_from_its_cursor(make_stack, processes):
    stack = make_stack(lease_seconds=12.0, dispatch_lease_seconds=12.0)
    stack.simulator.admin.add_fault("create:timeout_after_effect:amounts=23004:times=1")
    stack.simulator.admin.add_fault("list:latency:seconds=0.1")
    accepted = stack.pay("truth-killed", amount=23004)
    payment_id = accepted["id"]
    stack.simulator.simulator.seed_intents(
        2_000, created_from=int(time.time()) + 120, created_step=0.01
    )  # 21 pages
    victim = stack.start_worker(processes, name="victim")
    cut = stack.wait_for_record(payment_id, lambda r: r.lookup_pages >= 4, timeout=60)
    victim.kill()
    at_kill = stack.record(payment_id)
    read_before = len(list_requests(stack))
    assert at_kill.lookup_pending and at_kill.lookup_cursor is not None

    stack.start_sweeper(processes)
    stack.start_worker(processes, name="survivor")
    final = stack.wait_final(payment_id, timeout=90)

    assert final["status"] == "succeeded"
    assert stack.movements(payment_id) == 1
    total = len(list_requests(stack))
    # Resumed at the stored cursor: at most the page in flight is read twice.  Starting
    # over would have read the first pages again (>= 21 + pages before the kill).
    assert total <= 21 + 2, (total, read_before, cut.lookup_pages)
    assert total - read_before <= 21 - at_kill.lookup_pages + 2
