"""A circuit per connector account, on the real PostgreSQL, in frozen time (decision 0082).

The provider is the in-memory fake behind the real wrappers (observed, then gated by the
platform account's circuit); the engine, the sweeper and the circuit's row are the real
ones.  freezegun moves the clock and ``FrozenClock`` hands it to the SQL, so no test waits
for a circuit's open period.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.domain.circuit import (
    PLATFORM_CIRCUIT_KEY,
    CircuitPolicy,
    CircuitState,
    after_success,
    opened,
)
from orchestrator.domain.states import PaymentStatus, WaitingFor
from orchestrator.engine import circuits, sweep
from orchestrator.engine.circuits import CircuitBoard, policy_of
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.base import OutcomeUnknown
from orchestrator.providers.circuit import CircuitOpen
from orchestrator.services.captures import accept_capture
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingBatchPublisher, RecordingPublisher
from tests.harness.captures import authorized_payment, capture_fingerprint
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation
from tests.harness.seeds import accept, force, lease_history, new_merchant, reload

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
FAILURES = 3
OPEN = 15.0
RESUME_PER_SECOND = 2.0


class DownProvider(FakeProvider):
    """The fake provider, which fails every call with an unknown outcome while ``down``
    (a 503 or a timeout before it acted: nothing happens at the provider)."""

    down: bool = False
    refused_while_down: int = 0

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        operations = {
            "create_payment",
            "confirm_payment",
            "retrieve_payment",
            "list_payments",
            "capture_payment",
            "cancel_payment",
            "create_refund",
            "retrieve_refund",
            "list_refunds",
        }
        if name in operations and super().__getattribute__("down"):

            def failing(*args: Any, **kwargs: Any) -> Any:
                self.refused_while_down += 1
                raise OutcomeUnknown("503 Service Unavailable (provider down)", http_status=503)

            return failing
        return attribute


@pytest.fixture
def provider() -> DownProvider:
    return DownProvider()


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def container(
    make_postgres_database: Callable[[], str], provider: DownProvider, publisher: RecordingPublisher
) -> Iterator[Container]:
    built = build_container(
        make_postgres_database(),
        provider=provider,
        publisher=publisher,
        clock=FrozenClock(),
        circuit_failures=FAILURES,
        circuit_window_seconds=30.0,
        circuit_open_seconds=OPEN,
        circuit_probes=1,
        circuit_resume_per_second=RESUME_PER_SECOND,
        max_attempts=8,
    )
    yield built
    built.close()


@pytest.fixture
def clock(container: Container) -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        yield frozen


def run(container: Container, payment_id: str) -> ProcessResult:
    """One worker task for the payment, with the token its message would carry.  The
    backoff's jitter is seeded: the first payment's waits after its failed lookups stay in
    the task (a longer draw would defer it to the sweeper instead, a path of its own)."""
    token = reload(container, payment_id).lease_token
    return process_payment(
        container.runner(), payment_id, token, sleep=lambda _: None, rng=random.Random(3)
    )


def circuit_state(container: Container) -> CircuitState:
    with container.uow() as uow:
        circuit = uow.circuits.get(PLATFORM_CIRCUIT_KEY)
    return CircuitState.CLOSED if circuit is None else circuit.state


def test_an_outage_is_waited_out_no_attempt_spent_none_parked_and_resumed_oldest_first(
    container: Container,
    clock: FrozenDateTimeFactory,
    provider: DownProvider,
    publisher: RecordingPublisher,
) -> None:
    merchant = new_merchant(container)
    ids = []
    for n in range(6):
        ids.append(accept(container, merchant, f"k-{n}").id)
        clock.tick(1)
    first, rest = ids[0], ids[1:]

    # The provider goes down: the first payment's calls trip the circuit (a create and two
    # lookups: three failures) and count as its unknown outcomes, as they always did.
    provider.down = True
    assert run(container, first) is ProcessResult.WAITING
    assert circuit_state(container) is CircuitState.OPEN
    assert reload(container, first).unknown_outcomes == FAILURES
    calls_when_opened = provider.refused_while_down

    # Every other payment waits: no call made, no attempt spent, not parked.
    for payment_id in rest:
        assert run(container, payment_id) is ProcessResult.WAITING
    assert provider.refused_while_down == calls_when_opened
    for payment_id in rest:
        record = reload(container, payment_id)
        assert record.status is PaymentStatus.PROCESSING
        assert record.waiting_for is WaitingFor.CIRCUIT
        assert (record.attempts, record.unknown_outcomes) == (0, 0)

    # While open, the sweeper wakes none of them: no claim, no message per waiting payment.
    clock.tick(OPEN - 1)
    publisher.published.clear()
    report = container.sweeper().run_once()
    assert report.circuit_released == 0
    assert not set(rest) & {payment_id for payment_id, _ in publisher.published}

    # Half-open, still down: one probe (the oldest of those with the fewest unknown
    # outcomes), which fails and opens it again; the others stay waiting.
    clock.tick(2)
    report = container.sweeper().run_once()
    assert report.circuit_released == 1
    probe = rest[0]
    assert (probe, reload(container, probe).lease_token) in publisher.published
    run(container, probe)
    assert circuit_state(container) is CircuitState.OPEN
    assert provider.refused_while_down == calls_when_opened + 1
    assert reload(container, probe).unknown_outcomes == 1
    assert container.sweeper().run_once().circuit_released == 0  # one probe per period

    # The provider is back: the next period's probe (not the one that probed already)
    # succeeds and closes the circuit.
    provider.down = False
    clock.tick(OPEN + 1)
    assert container.sweeper().run_once().circuit_released == 1
    second_probe = rest[1]
    assert run(container, second_probe) is ProcessResult.COMPLETED
    assert reload(container, second_probe).status is PaymentStatus.SUCCEEDED
    assert circuit_state(container) is CircuitState.CLOSED

    # The rest resume at CIRCUIT_RESUME_PER_SECOND, oldest first.
    released: list[list[str]] = []
    for _ in range(3):
        clock.tick(1)
        publisher.published.clear()
        container.sweeper().run_once()
        released.append([payment_id for payment_id, _ in publisher.published])
        for payment_id in released[-1]:
            run(container, payment_id)
    waiting_in_order = [first, probe, *rest[2:]]
    # Oldest first, batch by batch (within one sweep's batch the publish order is the
    # publisher's).
    assert [set(batch) for batch in released] == [
        set(waiting_in_order[0:2]),
        set(waiting_in_order[2:4]),
        set(waiting_in_order[4:5]),
    ]

    for payment_id in ids:
        record = reload(container, payment_id)
        assert record.status is PaymentStatus.SUCCEEDED, (payment_id, record.last_error)
        assert provider.movements(payment_id) == 1


def board(container: Container, probes: int = 1) -> CircuitBoard:
    """Another process's view of the circuits (its own cache), on the same database."""
    policy = CircuitPolicy(failures=FAILURES, window_seconds=30.0, open_seconds=OPEN, probes=probes)
    return CircuitBoard(container.uow, policy)


def test_half_open_lets_at_most_the_probe_slots_through_across_processes(
    container: Container, clock: FrozenDateTimeFactory
) -> None:
    host_a = board(container).gate(PLATFORM_CIRCUIT_KEY)
    host_b = board(container).gate(PLATFORM_CIRCUIT_KEY)
    for _ in range(FAILURES):
        assert host_a.admit() is False
        host_a.settle(failed=True, probe=False)
    clock.tick(2)  # past host B's cached view
    with pytest.raises(CircuitOpen) as refused:
        host_b.admit()
    assert refused.value.retry_after == pytest.approx(OPEN - 2)

    clock.tick(OPEN)
    assert host_a.admit() is True  # the one probe slot
    with pytest.raises(CircuitOpen):
        host_b.admit()  # none left, whatever B's cache said

    # The probe's worker died: after another open period, a fresh slot.
    clock.tick(OPEN)
    assert host_b.admit() is True
    host_b.settle(failed=False, probe=True)
    assert circuit_state(container) is CircuitState.CLOSED
    clock.tick(2)
    assert host_a.admit() is False


def test_a_healthy_account_never_writes_its_circuit(
    container: Container, clock: FrozenDateTimeFactory
) -> None:
    merchant = new_merchant(container)
    for n in range(3):
        payment_id = accept(container, merchant, f"k-{n}").id
        assert run(container, payment_id) is ProcessResult.COMPLETED
    with container.uow() as uow:
        assert uow.circuits.all() == []


def test_failures_under_the_threshold_are_forgotten_after_a_success(
    container: Container, clock: FrozenDateTimeFactory
) -> None:
    gate = board(container).gate(PLATFORM_CIRCUIT_KEY)
    for _ in range(FAILURES - 1):
        gate.admit()
        gate.settle(failed=True, probe=False)
    gate.admit()
    gate.settle(failed=False, probe=False)
    gate.admit()
    gate.settle(failed=True, probe=False)
    with container.uow() as uow:
        circuit = uow.circuits.get(PLATFORM_CIRCUIT_KEY)
    assert circuit is not None
    assert (circuit.state, circuit.failures) == (CircuitState.CLOSED, 1)
    # The window restarted with the failure after the success (frozen at T0 throughout).
    assert circuit.window_started_at == T0


def test_a_capture_refused_by_an_open_circuit_waits_for_the_next_probe_without_an_attempt(
    container: Container, clock: FrozenDateTimeFactory, provider: DownProvider
) -> None:
    merchant = new_merchant(container)
    authorized = authorized_payment(container, merchant, "manual-1")
    accepted = accept_capture(
        container.uow,
        container.publisher,
        container.settings,
        merchant,
        authorized.id,
        "capture-1",
        None,
        capture_fingerprint(authorized.id, None),
    )
    gate = board(container).gate(PLATFORM_CIRCUIT_KEY)
    for _ in range(FAILURES):
        gate.admit()
        gate.settle(failed=True, probe=False)
    clock.tick(2)  # past the container's cached view of the circuit
    calls_before = len(provider.calls)

    operation = reload_operation(container, accepted.record.id)
    result = process_operation(
        container.runner(), operation.id, operation.lease_token, sleep=lambda _: None
    )

    assert result is ProcessResult.WAITING
    assert len(provider.calls) == calls_before
    waiting = reload_operation(container, operation.id)
    assert (waiting.attempts, waiting.unknown_outcomes) == (0, 0)
    assert waiting.status.value == "processing" and waiting.lease_owner is None
    # Re-checked when the next probe is due, spread over one open period.
    assert waiting.next_attempt_at is not None
    due_in = (waiting.next_attempt_at - (T0 + timedelta(seconds=2))).total_seconds()
    assert OPEN - 2 <= due_in <= 2 * OPEN - 2


def waiting_out_the_circuit(container: Container, payment_id: str, *, attempts: int = 0) -> None:
    """The row a worker's circuit wait leaves (``LeaseRepository.wait``)."""
    recheck = T0 + timedelta(seconds=300)
    force(
        container,
        payment_id,
        lease_owner=None,
        locked_until=recheck,
        next_attempt_at=recheck,
        waiting_for=WaitingFor.CIRCUIT.value,
        waiting_since=T0,
        attempts=attempts,
    )


@pytest.fixture
def batching(
    make_postgres_database: Callable[[], str], provider: DownProvider
) -> Iterator[tuple[Container, RecordingBatchPublisher]]:
    """A container whose publisher confirms wake-ups in batches (as the Celery one does),
    resuming every waiting payment at once when the circuit closes."""
    publisher = RecordingBatchPublisher()
    built = build_container(
        make_postgres_database(),
        provider=provider,
        publisher=publisher,
        clock=FrozenClock(),
        circuit_resume_per_second=0.0,
        dispatch_lease_seconds=60.0,
        max_attempts=3,
    )
    yield built, publisher
    built.close()


def test_the_close_hands_every_waiting_payment_to_the_workers_in_one_pass_in_batches(
    batching: tuple[Container, RecordingBatchPublisher], monkeypatch: pytest.MonkeyPatch
) -> None:
    container, publisher = batching
    monkeypatch.setattr(sweep, "PUBLISH_BATCH", 5)
    monkeypatch.setattr(circuits, "RELEASE_CHUNK", 4)
    with freeze_time(T0) as clock:
        merchant = new_merchant(container)
        ids = []
        for n in range(7):
            ids.append(accept(container, merchant, f"k-{n}").id)
            clock.tick(1)
        spent, resumable = ids[3], [*ids[:3], *ids[4:]]
        for payment_id in ids:
            waiting_out_the_circuit(container, payment_id, attempts=3 if payment_id == spent else 0)
        tokens_before = {
            payment_id: reload(container, payment_id).lease_token for payment_id in ids
        }
        publisher.published.clear()

        report = container.sweeper().run_once()

    # One pass: every resumable payment released with a new token and a dispatch lease,
    # in transactions of at most four (the one out of attempts among the first four), each
    # published as it committed (not five per confirm wait across them), oldest first; the
    # one out of attempts parked.
    assert report.circuit_released == 6
    assert publisher.batches == [
        [(p, tokens_before[p] + 1) for p in resumable[:3]],
        [(p, tokens_before[p] + 1) for p in resumable[3:]],
    ]
    assert report.parked == [spent]
    assert publisher.closed == 1  # a pass on its own leaves no batch connection open
    assert reload(container, spent).status is PaymentStatus.NEEDS_ATTENTION
    assert report.taken_over == [] and report.due_retries == []
    for payment_id in resumable:
        record = reload(container, payment_id)
        assert record.lease_owner == "dispatch:sweeper"
        assert record.waiting_for is None  # handed over: no longer waiting
        assert record.locked_until == T0 + timedelta(seconds=7 + 60)
        assert lease_history(container, payment_id) == [("takeover", tokens_before[payment_id] + 1)]
    # The published token is the one a worker claims with.
    assert run(container, resumable[0]) is ProcessResult.COMPLETED


def test_a_batch_the_broker_dropped_is_re_dispatched_once_its_dispatch_lease_ends(
    batching: tuple[Container, RecordingBatchPublisher],
) -> None:
    container, publisher = batching
    with freeze_time(T0) as clock:
        merchant = new_merchant(container)
        ids = []
        for n in range(5):
            ids.append(accept(container, merchant, f"k-{n}").id)
            clock.tick(1)
            waiting_out_the_circuit(container, ids[-1])
        publisher.published.clear()
        publisher.confirm_only = 2

        report = container.sweeper().run_once()
        assert report.circuit_released == 5
        assert [p for p, _ in publisher.published] == ids[:2]
        assert report.publish_failures == ids[2:]
        for payment_id in ids[:2]:  # their workers
            assert run(container, payment_id) is ProcessResult.COMPLETED

        # Nothing is due before the dispatch lease ends; then the rest are re-dispatched.
        clock.tick(30)
        assert container.sweeper().run_once().taken_over == []
        clock.tick(31)
        again = container.sweeper().run_once()
    # (Their leases all ended at once: the takeover's order among them is the database's.)
    assert sorted(again.taken_over) == sorted(ids[2:])
    assert sorted(p for p, _ in publisher.published) == sorted(ids)
    for payment_id, token in publisher.published[2:]:
        assert reload(container, payment_id).lease_token == token


def test_between_passes_the_sweeper_releases_a_closed_circuits_backlog_in_steps(
    make_postgres_database: Callable[[], str], provider: DownProvider
) -> None:
    """Real time, and a sweep interval far longer than the test: the close is noticed and
    the backlog handed back at the resume rate between passes, not at the next pass (once
    per pass, the workers idled for an interval between lumps of the resume rate)."""
    publisher = RecordingBatchPublisher()
    container = build_container(
        make_postgres_database(),
        provider=provider,
        publisher=publisher,
        circuit_open_seconds=3600.0,
        circuit_resume_per_second=4.0,
        sweep_interval_seconds=3600.0,
        dispatch_lease_seconds=60.0,
    )
    stop = threading.Event()
    sweeper = container.sweeper()
    thread = threading.Thread(target=sweeper.run, args=(stop,), daemon=True)
    try:
        merchant = new_merchant(container)
        ids = [accept(container, merchant, f"k-{n}").id for n in range(12)]
        for payment_id in ids:
            waiting_out_the_circuit(container, payment_id)
        with container.uow() as uow:
            now = uow.now()
            circuit = uow.circuits.lock(PLATFORM_CIRCUIT_KEY, now=now)
            uow.circuits.save(opened(circuit, now, policy_of(container.settings), 5), now=now)
            uow.commit()
        publisher.published.clear()
        thread.start()
        # The first pass finds the circuit open with its probe an hour away: nothing owed.
        time.sleep(2 * sweep.RESUME_STEP_SECONDS)  # steps run meanwhile, releasing nothing
        assert publisher.published == []

        with container.uow() as uow:
            now = uow.now()
            circuit = uow.circuits.lock(PLATFORM_CIRCUIT_KEY, now=now)
            uow.circuits.save(after_success(circuit, now), now=now)
            uow.commit()
        deadline = time.monotonic() + 30.0  # the next pass is an hour away
        while len(publisher.published) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the recording publisher for a condition

        # Every one handed back, oldest first, in several steps (4 a second, about 2 a
        # step: one lump would take a stall of three seconds between two steps).
        assert [p for p, _ in publisher.published] == ids
        assert len(publisher.batches) >= 2
        assert all(reload(container, p).lease_owner == "dispatch:sweeper" for p in ids)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=10)
        container.close()
