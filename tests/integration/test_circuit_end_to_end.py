"""A provider outage waited out by real processes (decision 0082): PostgreSQL, RabbitMQ, the
Stripe simulator, the API, a ``payorch worker`` and a ``payorch sweeper``.

The simulator answers every request with a 500 before acting (``any:error_500_before``), or
never answers in time (``any:hang``: every call a timeout), while payments arrive, then
recovers.  The circuit of the platform's account opens after
``CIRCUIT_FAILURES`` failures; from then on the provider sees only the probes, the payments
wait (none parked), and after the recovery every payment succeeds, charged once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY, CircuitState
from tests.harness.stack import Stack, running_stack

FAILURES = 5
OPEN_SECONDS = 2.0
PROBES = 1
PAYMENTS = 60
ARRIVALS_PER_SECOND = 5.0
OUTAGE_SECONDS = 16.0


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        circuit_failures=FAILURES,
        circuit_window_seconds=30.0,
        circuit_open_seconds=OPEN_SECONDS,
        circuit_probes=PROBES,
        circuit_resume_per_second=50.0,
    ) as built:
        yield built


def calls_while_down(stack: Stack) -> int:
    """Requests the simulator failed: every one it received during the outage."""
    return sum(1 for request in stack.simulator.admin.requests() if request.get("fault"))


@pytest.mark.parametrize("fault", ["any:error_500_before", "any:hang:seconds=3"])
def test_an_outage_parks_nothing_calls_drop_to_probes_and_every_payment_succeeds_once(
    stack: Stack, processes, fault: str
) -> None:
    stack.start_worker(processes, concurrency=4)
    sweeper = stack.start_sweeper(processes)
    rule = stack.simulator.admin.add_fault(fault)
    started = time.monotonic()

    ids = []
    for n in range(PAYMENTS):
        ids.append(stack.pay(f"outage-{n}")["id"])
        time.sleep(1.0 / ARRIVALS_PER_SECOND)  # the arrival rate, not a wait for a timeout
    remaining = OUTAGE_SECONDS - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)  # the rest of the outage, with payments waiting it out
    during = calls_while_down(stack)
    with stack.container.uow() as uow:
        circuit = uow.circuits.get(PLATFORM_CIRCUIT_KEY)
        parked_during = uow.search.status_counts(now=uow.now()).by_status.get("needs_attention", 0)
    stack.simulator.admin.remove_fault(rule["id"])
    outage = time.monotonic() - started

    # It opened, and the provider then saw only what tripped it, the calls a worker's
    # second-old view let through, and the probes (PROBES per open period).
    assert circuit is not None and circuit.state is not CircuitState.CLOSED
    periods = outage / OPEN_SECONDS + 1
    let_through_by_stale_views = 4 * 2  # a second of four worker threads' calls, a margin
    bound = FAILURES + let_through_by_stale_views + PROBES * periods
    assert FAILURES <= during <= bound, (during, bound)
    assert during < PAYMENTS  # without the circuit: every payment calls, several times
    assert parked_during == 0

    for payment_id in ids:
        final = stack.wait_final(payment_id, timeout=120)
        assert final["status"] == "succeeded", (payment_id, stack.record(payment_id))
        assert stack.movements(payment_id) == 1, payment_id
    with stack.container.uow() as uow:
        closed = uow.circuits.get(PLATFORM_CIRCUIT_KEY)
        counts = uow.search.status_counts(now=uow.now()).by_status
    assert closed is not None and closed.state is CircuitState.CLOSED
    assert counts.get("needs_attention", 0) == 0
    assert sweeper.running, sweeper.tail()
