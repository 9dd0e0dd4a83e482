"""The dispatcher's hold (decision 0109): a payment accepted while its account's circuit is
open waits without a message, and the sweeper publishes its one wake-up when the circuit
lets calls through again.

Real PostgreSQL and the real dispatcher thread (LISTEN, catch-up, the hold's statement); the
broker is a recording fake, so every message is counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.circuit import (
    PLATFORM_CIRCUIT_KEY,
    Circuit,
    CircuitState,
    after_success,
    opened,
)
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import PaymentStatus, WaitingFor
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.circuits import policy_of
from orchestrator.engine.dispatcher import start_in_thread
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, lease_history, new_merchant, reload

RECHECK_SECONDS = 300.0


@pytest.fixture
def container(make_postgres_database: Callable[[], str]) -> Iterator[Container]:
    built = build_container(
        make_postgres_database(),
        provider=FakeProvider(),
        publisher=RecordingPublisher(),
        wake_up="notify",
        circuit_wait_recheck_seconds=RECHECK_SECONDS,
        circuit_resume_per_second=0.0,
    )
    yield built
    built.close()


def set_platform_circuit(
    container: Container, change: Callable[[Circuit, datetime], Circuit]
) -> None:
    with container.uow() as uow:
        now = uow.now()
        circuit = uow.circuits.lock(PLATFORM_CIRCUIT_KEY, now=now)
        uow.circuits.save(change(circuit, now), now=now)
        uow.commit()


def open_platform_circuit(container: Container) -> None:
    policy = policy_of(container.settings)
    set_platform_circuit(container, lambda c, now: opened(c, now, policy, policy.failures))


def dispatch_until(
    container: Container, publisher: RecordingPublisher, done: Callable[[], bool]
) -> None:
    """The real dispatcher (catching up on what was accepted before it listened) until
    ``done``."""
    stop = threading.Event()
    dispatcher, thread = start_in_thread(
        container.settings.database_url,
        publisher,
        name="test-dispatcher",
        stop=stop,
        circuit_hold=CircuitHold.of(container.settings),
    )
    try:
        assert dispatcher.listening.wait(30), "the dispatcher never listened"
        deadline = time.monotonic() + 30
        while not done():
            assert time.monotonic() < deadline, "the dispatcher never got there"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_payment_accepted_while_its_circuit_is_open_costs_one_message_in_all(
    container: Container,
) -> None:
    merchant = new_merchant(container)
    open_platform_circuit(container)
    alone = accept(container, merchant, "no-next-account")
    may_fail_over = accept(container, merchant, "with-a-next-account")
    force(container, may_fail_over.id, route=[PLATFORM_ACCOUNT, "ca_the_next_one"])
    dispatched = RecordingPublisher()

    dispatch_until(
        container,
        dispatched,
        lambda: bool(dispatched.published) and reload(container, alone.id).lease_owner is None,
    )

    # Held: no message; the worker's circuit wait, written by the dispatcher under the
    # accept's token (nobody held a lease to fence out), no attempt counted.
    held = reload(container, alone.id)
    assert [payment_id for payment_id, _ in dispatched.published] == [may_fail_over.id]
    assert held.status is PaymentStatus.PROCESSING
    assert held.waiting_for is WaitingFor.CIRCUIT
    assert (held.lease_token, held.attempts) == (alone.lease_token, 0)
    assert held.next_attempt_at is not None and held.locked_until == held.next_attempt_at
    with container.uow() as uow:
        now = uow.now()
    assert timedelta(seconds=RECHECK_SECONDS - 60) < held.next_attempt_at - now
    assert lease_history(container, alone.id) == [("wait", alone.lease_token)]
    # The one whose route goes on was published, for its worker to fail over at once.
    assert reload(container, may_fail_over.id).waiting_for is None

    # While the circuit stays open the sweeper publishes nothing for it.
    sweeper_publisher = container.publisher
    assert isinstance(sweeper_publisher, RecordingPublisher)
    container.sweeper().run_once()
    assert alone.id not in {payment_id for payment_id, _ in sweeper_publisher.published}

    # Closed: its one wake-up, which a worker claims and charges with.
    set_platform_circuit(container, after_success)
    report = container.sweeper().run_once()
    assert report.circuit_released == 1
    token = reload(container, alone.id).lease_token
    assert [w for w in sweeper_publisher.published if w[0] == alone.id] == [(alone.id, token)]
    result = process_payment(container.runner(), alone.id, token, sleep=lambda _: None)
    assert result is ProcessResult.COMPLETED
    assert reload(container, alone.id).status is PaymentStatus.SUCCEEDED


def test_nothing_is_held_while_every_circuit_is_closed(container: Container) -> None:
    merchant = new_merchant(container)
    open_platform_circuit(container)
    set_platform_circuit(container, after_success)
    ids = [accept(container, merchant, f"k-{n}").id for n in range(3)]
    dispatched = RecordingPublisher()

    dispatch_until(container, dispatched, lambda: len(dispatched.published) == 3)

    assert sorted(payment_id for payment_id, _ in dispatched.published) == sorted(ids)
    for payment_id in ids:
        assert reload(container, payment_id).lease_owner == "dispatch"
        assert lease_history(container, payment_id) == []


def test_a_half_open_circuit_holds_only_once_its_probe_slots_are_taken(
    container: Container,
) -> None:
    """A probe that hangs to its read timeout keeps the circuit half-open that long: the
    payments accepted meanwhile would be refused (no slot left) and are held; while a
    slot is free a new payment may be the probe, and is published."""
    merchant = new_merchant(container)
    probes = container.settings.circuit_probes
    set_platform_circuit(
        container,
        lambda c, now: replace(c, state=CircuitState.HALF_OPEN, since=now, probes=probes),
    )
    slots_taken = accept(container, merchant, "while-the-probes-are-out")
    dispatched = RecordingPublisher()
    dispatch_until(
        container, dispatched, lambda: reload(container, slots_taken.id).lease_owner is None
    )
    assert dispatched.published == []
    assert reload(container, slots_taken.id).waiting_for is WaitingFor.CIRCUIT

    set_platform_circuit(container, lambda c, now: replace(c, probes=probes - 1))
    slot_free = accept(container, merchant, "may-be-the-probe")
    dispatch_until(container, dispatched, lambda: bool(dispatched.published))
    assert [payment_id for payment_id, _ in dispatched.published] == [slot_free.id]
    assert reload(container, slot_free.id).waiting_for is None
