"""The wake-up of an accepted payment under PAYORCH_WAKE_UP=notify (issue 14, goal 3).

The accept's statement sends a NOTIFY (delivered only on commit); the dispatcher publishes
the task.  Every way that wake-up can be lost ends at the sweeper once the dispatch lease
expires, which these tests shrink through settings instead of waiting it out: no
dispatcher listening, a dispatcher whose publishes fail.  Real PostgreSQL, RabbitMQ and
``payorch worker`` processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest

from orchestrator.db.wake import WAKE_CHANNEL
from orchestrator.domain.circuit import CircuitPolicy
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.dispatcher import Dispatcher, libpq_url, start_in_thread
from orchestrator.engine.publisher import PublishFailed, TaskPublisher
from orchestrator.services.captures import accept_capture
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.captures import authorized_payment, capture_fingerprint
from tests.harness.containers import build_container
from tests.harness.refunds import request_refund, succeeded_payment
from tests.harness.seeds import accept, new_merchant
from tests.harness.stack import Stack, running_stack

# Short enough that the sweeper's recovery is quick, long enough on a busy machine that a
# worker's claim never races the takeover in these tests' assertions (they accept both).
LOST_LEASE_SECONDS = 1.0
# No circuit opens here: the dispatcher's hold (decision 0109) with the default settings.
HOLD = CircuitHold(
    300.0, CircuitPolicy(failures=20, window_seconds=30.0, open_seconds=15.0, probes=2)
)


def wait_until(what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


@contextmanager
def dispatching(database_url: str, publisher: TaskPublisher, name: str) -> Iterator[Dispatcher]:
    stop = threading.Event()
    dispatcher, thread = start_in_thread(
        database_url, publisher, name=name, stop=stop, circuit_hold=HOLD
    )
    try:
        yield dispatcher
    finally:
        stop.set()
        thread.join(timeout=10)


@contextmanager
def sweeping(stack: Stack) -> Iterator[None]:
    """The sweeper's loop itself (without the dispatcher ``payorch sweeper`` also hosts)."""
    stop = threading.Event()
    thread = threading.Thread(target=stack.container.sweeper("test-sweeper").run, args=(stop,))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


class FailingPublisher:
    """A broker that refuses every publish, counting the attempts."""

    def __init__(self) -> None:
        self.attempts = 0

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        self.attempts += 1
        raise PublishFailed("broker refused (fake)")

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        raise PublishFailed("broker refused (fake)")

    def broker_reachable(self) -> bool:
        return False


@pytest.fixture
def lost_stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    """No dispatcher in this process, and a dispatch lease of one second."""
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        dispatcher=False,
        dispatch_lease_seconds=LOST_LEASE_SECONDS,
        sweep_interval_seconds=0.2,
    ) as built:
        yield built


def test_the_accept_notifies_once_on_commit_and_publishes_nothing_itself(make_postgres_database):
    database_url = make_postgres_database()
    publisher = RecordingPublisher()
    container = build_container(database_url, publisher=publisher, wake_up="notify")
    try:
        merchant = new_merchant(container, "notify-merchant")
        with psycopg.connect(libpq_url(database_url), autocommit=True) as listener:
            listener.execute(f"LISTEN {WAKE_CHANNEL}")
            record = accept(container, merchant, "notify-once")
            replay = accept(container, merchant, "notify-once")
            heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
            # Anything more (a second NOTIFY from the replay) would be here by now: it
            # was sent, if at all, before the replay's answer.
            heard += [n.payload for n in listener.notifies(timeout=0.5)]
    finally:
        container.close()

    assert replay.id == record.id
    assert heard == [f"{record.id}:1"]
    assert publisher.published == []


def test_a_lost_wake_up_is_processed_by_the_sweeper_after_the_dispatch_lease(lost_stack, processes):
    stack = lost_stack
    stack.start_worker(processes)
    # Nobody LISTENs: PostgreSQL drops the NOTIFY, and no task is published.
    accepted = stack.pay("lost-wake-up")
    assert stack.record(accepted["id"]).lease_token == 1

    with sweeping(stack):
        final = stack.wait_final(accepted["id"], timeout=120)

    assert final["status"] == "succeeded"
    assert stack.movements(accepted["id"]) == 1
    # The sweeper's takeover (token 2), then a worker's claim (3): recovered, not woken.
    assert stack.record(accepted["id"]).lease_token >= 3


def test_failed_publishes_are_counted_and_the_sweeper_recovers_the_payment(lost_stack, processes):
    stack = lost_stack
    stack.start_worker(processes)
    broker = FailingPublisher()
    with dispatching(stack.database_url, broker, "failing-dispatcher") as dispatcher:
        assert dispatcher.listening.wait(60)
        accepted = stack.pay("publish-failed")
        wait_until("the dispatcher tried to publish", lambda: broker.attempts >= 1)
        assert stack.record(accepted["id"]).lease_token == 1

        with sweeping(stack):
            final = stack.wait_final(accepted["id"], timeout=120)

    assert final["status"] == "succeeded"
    assert stack.movements(accepted["id"]) == 1
    assert stack.record(accepted["id"]).lease_token >= 3


def test_a_dispatcher_started_late_wakes_the_payments_accepted_before_it(
    make_postgres_database, make_broker_url, processes
):
    # A dispatch lease far beyond the test: only the dispatcher's catch-up can wake it.
    with running_stack(
        make_postgres_database(), make_broker_url(), dispatcher=False, dispatch_lease_seconds=600
    ) as stack:
        stack.start_worker(processes)
        accepted = stack.pay("before-the-dispatcher")
        assert stack.record(accepted["id"]).lease_token == 1

        with dispatching(stack.database_url, stack.container.publisher, "late"):
            final = stack.wait_final(accepted["id"], timeout=120)

        assert final["status"] == "succeeded"
        assert stack.movements(accepted["id"]) == 1
        # Woken by its own dispatch lease's token: a claim, no takeover.
        assert stack.record(accepted["id"]).lease_token == 2


def test_a_late_dispatcher_catches_up_on_a_backlog_larger_than_a_thousand(make_postgres_database):
    # The catch-up once stopped at 1,000: the rest of a burst accepted while no dispatcher
    # listened waited out its whole dispatch lease for the sweeper.
    database_url = make_postgres_database()
    # A dispatch lease far beyond the accepts, however slow the machine: an expired one
    # would leave the catch-up to the sweeper, which is not what this test is about.
    container = build_container(database_url, wake_up="notify", dispatch_lease_seconds=600)
    publisher = RecordingPublisher()
    try:
        merchant = new_merchant(container, "backlog-merchant")
        backlog = {accept(container, merchant, f"backlog-{n}").id for n in range(1_200)}
        with dispatching(database_url, publisher, "late-backlog") as dispatcher:
            assert dispatcher.listening.wait(60)
            wait_until(
                "the whole backlog published",
                lambda: {p[0] for p in publisher.published} >= backlog,
            )
    finally:
        container.close()

    assert sorted(publisher.published) == sorted((payment_id, 1) for payment_id in backlog)


def test_one_dispatcher_is_active_and_a_standby_takes_over_when_it_stops(
    make_postgres_database,
):
    database_url = make_postgres_database()
    container = build_container(database_url, wake_up="notify")
    first, second = RecordingPublisher(), RecordingPublisher()
    stop_first, stop_second = threading.Event(), threading.Event()
    try:
        merchant = new_merchant(container, "standby-merchant")
        active, active_thread = start_in_thread(
            database_url, first, name="a", stop=stop_first, circuit_hold=HOLD
        )
        assert active.listening.wait(60)
        standby, standby_thread = start_in_thread(
            database_url, second, name="b", stop=stop_second, circuit_hold=HOLD
        )
        record = accept(container, merchant, "while-one-active")
        wait_until("the active one published", lambda: bool(first.published))
        assert not standby.listening.is_set()
        assert second.published == []

        # The active one's session ends: its lock is released, the standby takes it.
        stop_first.set()
        active_thread.join(timeout=30)
        wait_until("the standby listens", standby.listening.is_set)
        later = accept(container, merchant, "after-the-active-stopped")
        wait_until("the standby published", lambda: later.id in {p[0] for p in second.published})
    finally:
        stop_first.set()
        stop_second.set()
        container.close()
    standby_thread.join(timeout=30)

    assert first.published == [(record.id, 1)]
    assert later.id not in {p[0] for p in first.published}


# -- captures, cancels, refunds: the same wake-up ------------------------------------------


class TaskRecordingPublisher:
    """Remembers which task each wake-up was published as."""

    def __init__(self) -> None:
        self.published: list[tuple[str, str, int]] = []

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        self.published.append(("process_payment", payment_id, lease_token))

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        self.published.append(("process_operation", operation_id, lease_token))

    def broker_reachable(self) -> bool:
        return True


class BatchRecordingPublisher(TaskRecordingPublisher):
    """A publisher with batches (as the production one): payments may come in batches."""

    def publish_process_payments(self, wakeups) -> None:
        for payment_id, token in wakeups:
            self.publish_process_payment(payment_id, token)

    def close_batches(self) -> None:
        pass


def _capture(container, merchant, payment_id: str, key: str):
    return accept_capture(
        container.uow,
        container.publisher,
        container.settings,
        merchant,
        payment_id,
        key,
        None,
        capture_fingerprint(payment_id, None),
    )


def test_an_operation_accept_notifies_once_on_commit_and_publishes_nothing_itself(
    make_postgres_database,
):
    database_url = make_postgres_database()
    publisher = RecordingPublisher()
    container = build_container(
        database_url, publisher=publisher, provider=FakeProvider(), wake_up="notify"
    )
    try:
        merchant = new_merchant(container, "notify-operations")
        authorized = authorized_payment(container, merchant, "to-capture")
        paid = succeeded_payment(container, merchant, "to-refund")
        with psycopg.connect(libpq_url(database_url), autocommit=True) as listener:
            listener.execute(f"LISTEN {WAKE_CHANNEL}")
            capture = _capture(container, merchant, authorized.id, "capture-once")
            replay = _capture(container, merchant, authorized.id, "capture-once")
            refund = request_refund(container, merchant, paid.id, "refund-once", amount=100)
            heard = [n.payload for n in listener.notifies(timeout=5, stop_after=2)]
            heard += [n.payload for n in listener.notifies(timeout=0.5)]
    finally:
        container.close()

    assert replay.replayed and replay.record.id == capture.record.id
    assert heard == [f"{capture.record.id}:1", f"{refund.record.id}:1"]
    assert publisher.published == []


@pytest.mark.parametrize("broker_kind", [TaskRecordingPublisher, BatchRecordingPublisher])
def test_the_dispatcher_publishes_an_operations_task_and_catches_up_on_waiting_ones(
    make_postgres_database, broker_kind
):
    database_url = make_postgres_database()
    container = build_container(database_url, provider=FakeProvider(), wake_up="notify")
    broker = broker_kind()
    try:
        merchant = new_merchant(container, "dispatch-operations")
        early = authorized_payment(container, merchant, "before-the-dispatcher")
        late = authorized_payment(container, merchant, "while-it-listens")
        waiting = _capture(container, merchant, early.id, "capture-before")
        with dispatching(database_url, broker, "operations") as dispatcher:
            assert dispatcher.listening.wait(60)
            heard = _capture(container, merchant, late.id, "capture-while")
            wait_until(
                "both captures published",
                lambda: {p[1] for p in broker.published} >= {waiting.record.id, heard.record.id},
            )
    finally:
        container.close()

    operations = [p for p in broker.published if p[1].startswith("cap_")]
    assert sorted(operations) == sorted(
        [
            ("process_operation", waiting.record.id, 1),
            ("process_operation", heard.record.id, 1),
        ]
    )


def test_a_lost_capture_wake_up_is_processed_by_the_sweeper_after_the_dispatch_lease(
    lost_stack, processes
):
    stack = lost_stack
    stack.start_worker(processes)
    with sweeping(stack):
        accepted = stack.pay("lost-capture-wake-up", amount=1400, capture_method="manual")
        wait_until(
            "the payment is authorised",
            lambda: stack.payment(accepted["id"])["status"] == "requires_capture",
            timeout=120,
        )
        # Nobody LISTENs: the capture's NOTIFY is dropped, and no task is published.
        with stack.client() as client:
            answer = client.post(
                f"/v1/payments/{accepted['id']}/capture",
                json={},
                headers={"Idempotency-Key": "lost-capture"},
            )
        assert answer.status_code == 202, answer.text
        capture_id = answer.headers["Operation-Id"]
        final = stack.wait_final(accepted["id"], timeout=120)

    assert final["status"] == "succeeded" and final["amount_captured"] == 1400
    assert stack.simulator.admin.movements()["captures"]["by_record"] == {accepted["id"]: 1}
    # The sweeper's takeover (token 2), then a worker's claim (3): recovered, not woken.
    assert stack.operation(capture_id).lease_token >= 3
