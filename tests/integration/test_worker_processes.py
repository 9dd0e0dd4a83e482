"""``payorch worker`` as a supervisor of threads-pool processes (``cli.worker.processes``), in
real processes against PostgreSQL, RabbitMQ and the simulator: its processes share the
work, stop together, die with it, and finish what they hold on SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import lease_events
from tests.harness.stack import Stack, running_stack, wait_for_output
from tests.support.processes import ManagedProcess, ProcessManager, process_group


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    with running_stack(make_postgres_database(), make_broker_url()) as built:
        yield built


def start_two_process_worker(processes: ProcessManager, stack: Stack, name: str) -> ManagedProcess:
    worker = processes.payorch(
        "worker", "--processes", "2", "--concurrency", "4", name=name, env=stack.env
    )
    wait_until(lambda: worker.output().count("ready.") == 2, worker, "both processes ready")
    return worker


def children_of(worker: ManagedProcess) -> set[int]:
    return process_group(worker.pid) - {worker.pid}


def wait_until(condition: Callable[[], bool], worker: ManagedProcess, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}:\n{worker.tail()}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_both_worker_processes_take_payments_from_the_same_queue(stack, processes):
    # The sweeper as deployed: on a slow machine a task may hand a payment back to the row
    # (``payment_deferred``), and only the sweeper dispatches it again.
    stack.start_sweeper(processes)
    worker = start_two_process_worker(processes, stack, "worker")
    children = children_of(worker)
    assert len(children) == 2

    accepted = [stack.pay(f"two-processes-{n}") for n in range(12)]
    for payment in accepted:
        assert stack.wait_final(payment["id"])["status"] == "succeeded"
        assert stack.movements(payment["id"]) == 1

    # Which process claimed each payment is in its lease history (owner = host:pid).
    # RabbitMQ hands a queue's messages round-robin to the consumers with room: both take
    # some.
    with stack.container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(lease_events.c.owner).where(
                lease_events.c.payment_id.in_([p["id"] for p in accepted]),
                lease_events.c.event == "claim",
            )
        ).all()
    assert {int(str(row.owner).rsplit(":", 1)[-1]) for row in rows} == children
    assert worker.poll() is None


def test_a_killed_supervisor_takes_its_worker_processes_with_it(stack, processes):
    worker = start_two_process_worker(processes, stack, "supervised")
    children = children_of(worker)
    assert len(children) == 2

    worker.kill(group=False)  # SIGKILL to the supervisor alone, as an OOM kill would

    wait_until(lambda: not any(alive(pid) for pid in children), worker, "children gone")


def test_when_one_worker_process_dies_the_command_stops_and_exits_non_zero(stack, processes):
    worker = start_two_process_worker(processes, stack, "one-dies")
    victim, survivor = sorted(children_of(worker))

    os.kill(victim, signal.SIGKILL)

    assert worker.wait(timeout=60) == 128 + signal.SIGKILL
    assert not alive(survivor)
    assert "worker_process_exited" in worker.output()


@pytest.fixture
def patient_stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    """A provider timeout well above the slow confirm below, and a lease (and so a task
    budget) long enough for it: the confirm's outcome is never unknown, so the payment ends
    in this run however slow the machine (with the suite's 1.5 s timeout it was deferred
    to a sweeper that this test does not run)."""
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        lease_seconds=30.0,
        dispatch_lease_seconds=30.0,
        provider_timeout_seconds=8.0,
    ) as built:
        yield built


def test_sigterm_lets_every_worker_process_finish_the_payment_it_holds(patient_stack, processes):
    stack = patient_stack
    # The confirm takes 3 s at the provider: the SIGTERM arrives while it is in flight.
    stack.simulator.admin.add_fault("confirm:latency:amounts=1321:seconds=3:times=1")
    worker = start_two_process_worker(processes, stack, "warm")
    accepted = stack.pay("two-processes-warm", amount=1321)
    stack.wait_for_record(accepted["id"], lambda r: r.confirm_attempts == 1, timeout=30)

    worker.send_signal(signal.SIGTERM)  # the supervisor alone; it passes the signal on

    assert worker.wait(timeout=60) == 0
    # No sweeper and no other worker ran: the process that held it finished it.
    assert stack.payment(accepted["id"])["status"] == "succeeded"
    assert stack.movements(accepted["id"]) == 1
    wait_for_output(worker, "worker_supervisor_started")


# The supervisor's signal rules, with children that only record what reaches them.
RECORDING_CHILDREN = """
import os, signal, sys, time
from pathlib import Path
from orchestrator.cli.worker.processes import run_forked

out = Path(sys.argv[1])

def run(index, share):
    got = []
    def record(sig, _frame):
        got.append(signal.Signals(sig).name)
        (out / f"got-{index}").write_text(" ".join(got))
        if sig == signal.SIGQUIT:
            raise SystemExit(3)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, record)
    (out / f"ready-{index}").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)

raise SystemExit(run_forked([1, 1], run))
"""


def test_sigint_is_passed_on_as_a_warm_shutdown_then_a_cold_one(processes, tmp_path):
    supervisor = processes.start(
        [sys.executable, "-c", RECORDING_CHILDREN, str(tmp_path)], name="supervisor"
    )
    got = [tmp_path / "got-0", tmp_path / "got-1"]
    wait_until(lambda: all((tmp_path / f"ready-{n}").exists() for n in (0, 1)), supervisor, "ready")

    supervisor.send_signal(signal.SIGINT)
    wait_until(lambda: all(p.exists() for p in got), supervisor, "SIGTERM passed on")
    assert [p.read_text() for p in got] == ["SIGTERM", "SIGTERM"]
    supervisor.send_signal(signal.SIGINT)

    assert supervisor.wait(timeout=30) == 3  # what the children exited with
    assert [p.read_text() for p in got] == ["SIGTERM SIGQUIT", "SIGTERM SIGQUIT"]


def test_a_hangup_stops_the_worker_processes_warmly_and_never_reaches_them(processes, tmp_path):
    supervisor = processes.start(
        [sys.executable, "-c", RECORDING_CHILDREN, str(tmp_path)], name="supervisor"
    )
    got = [tmp_path / "got-0", tmp_path / "got-1"]
    wait_until(lambda: all((tmp_path / f"ready-{n}").exists() for n in (0, 1)), supervisor, "ready")

    # To the whole group, as a closed terminal or `pkill -HUP` would send it.
    supervisor.send_signal(signal.SIGHUP, group=True)
    wait_until(lambda: all(p.exists() for p in got), supervisor, "SIGTERM passed on")
    supervisor.send_signal(signal.SIGQUIT)

    assert supervisor.wait(timeout=30) == 3
    assert [p.read_text() for p in got] == ["SIGTERM SIGQUIT", "SIGTERM SIGQUIT"]
