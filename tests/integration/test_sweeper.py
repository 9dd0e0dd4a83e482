"""The sweeper as a whole: concurrent sweepers, the loop, a deferred retry driven by the
backoff schedule in frozen time, and ``payorch sweep --once``."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.engine.publisher import PublishFailed
from orchestrator.engine.sweep import MAX_CONSECUTIVE_PUBLISH_FAILURES, Sweeper, SweepReport
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload
from tests.integration.lease_helpers import (
    cli_environment,
    expired_payments,
    lease_tokens,
    run_payorch_json,
    take_process_payment_messages,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPIRED_RECORDS = 300


@pytest.fixture
def container(database_url: str) -> Iterator[Container]:
    built = build_container(database_url, publisher=RecordingPublisher())
    yield built
    built.close()


def sweep_until_idle(sweeper: Sweeper, start: threading.Barrier) -> list[SweepReport]:
    start.wait()
    reports = []
    while True:
        report = sweeper.run_once()
        reports.append(report)
        if not report.taken_over and not report.skipped:
            return reports


def test_two_sweepers_running_at_once_never_take_the_same_record(database_url, container):
    records = expired_payments(container, new_merchant(container), EXPIRED_RECORDS)
    initial = {r.id: r.lease_token for r in records}
    # Two sweepers with their own engines and connections, as two hosts would have.
    publishers = [RecordingPublisher(), RecordingPublisher()]
    containers = [
        build_container(database_url, publisher=p, migrate=False, sweep_batch_size=20)
        for p in publishers
    ]
    sweepers = [c.sweeper(name=f"sweeper-{n}") for n, c in enumerate(containers)]
    start = threading.Barrier(2)
    results: dict[int, list[SweepReport]] = {}
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            results[n] = sweep_until_idle(sweepers[n], start)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for built in containers:
        built.close()
    assert not errors, errors

    taken = [[i for report in results[n] for i in report.taken_over] for n in range(2)]
    if not container.settings.is_sqlite:
        # SQLite has one writer at a time, and its busy handler may let one sweeper starve
        # until the other is done; PostgreSQL's SKIP LOCKED shares the work.
        assert all(taken), "both sweepers should have had a share of the work"
    assert set(taken[0]).isdisjoint(taken[1])
    counts = Counter(taken[0] + taken[1])
    assert set(counts) == set(initial)
    assert set(counts.values()) == {1}
    # The token moved exactly once per record, and one message carries each new token.
    assert lease_tokens(container) == {i: token + 1 for i, token in initial.items()}
    messages = publishers[0].published + publishers[1].published
    assert sorted(messages) == sorted((i, token + 1) for i, token in initial.items())
    assert all(not report.skipped for n in range(2) for report in results[n])


class DeadBroker:
    """Every publish fails, as with the broker down; counts the attempts."""

    def __init__(self) -> None:
        self.attempts = 0

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        self.attempts += 1
        raise PublishFailed("connection refused (fake)")

    publish_operation = publish_process_payment


def test_with_the_broker_down_a_pass_stops_publishing_after_a_few_failures(database_url, container):
    records = expired_payments(container, new_merchant(container), 10)
    broker = DeadBroker()
    sweeping = build_container(database_url, publisher=broker, migrate=False)
    try:
        report = sweeping.sweeper().run_once()
    finally:
        sweeping.close()

    assert sorted(report.taken_over) == sorted(r.id for r in records)
    assert sorted(report.publish_failures) == sorted(report.taken_over)
    assert broker.attempts == MAX_CONSECUTIVE_PUBLISH_FAILURES
    # Every takeover committed: each record waits out its dispatch lease for the next pass.
    tokens = lease_tokens(container)
    assert all(tokens[r.id] == r.lease_token + 1 for r in records)


def test_the_loop_sweeps_until_told_to_stop(database_url):
    publisher = RecordingPublisher()
    container = build_container(database_url, publisher=publisher, sweep_interval_seconds=0.05)
    try:
        [record] = expired_payments(container, new_merchant(container), 1)
        publisher.published.clear()
        stop = threading.Event()
        loop = threading.Thread(target=container.sweeper().run, args=(stop,))
        loop.start()
        try:
            for _ in range(200):
                if publisher.published:
                    break
                stop.wait(0.05)
        finally:
            stop.set()
            loop.join(timeout=10)
        assert not loop.is_alive()
        assert publisher.published == [(record.id, record.lease_token + 1)]
    finally:
        container.close()


def test_a_long_backoff_waits_in_the_row_until_the_sweeper_finds_it_due(database_url):
    provider = FakeProvider(retry_after=120.0)  # longer than any wait inside a task
    provider.fail("create", 1, "rate_limited")
    publisher = RecordingPublisher()
    container = build_container(
        database_url,
        provider=provider,
        publisher=publisher,
        clock=FrozenClock(),
        max_in_task_wait_seconds=5.0,
    )
    try:
        with freeze_time(T0) as clock:
            record = accept(container, new_merchant(container), "order-1")
            result = process_payment(
                container.runner(),
                record.id,
                record.lease_token,
                sleep=lambda _s: None,
                rng=random.Random(5),
            )
            assert result is ProcessResult.DEFERRED
            deferred = reload(container, record.id)
            assert deferred.lease_owner is None
            assert deferred.next_attempt_at is not None
            assert deferred.next_attempt_at >= T0 + timedelta(seconds=120)  # Retry-After: a floor

            clock.move_to(deferred.next_attempt_at - timedelta(microseconds=1))
            assert container.sweeper().run_once().requeued == []
            clock.move_to(deferred.next_attempt_at)
            report = container.sweeper().run_once()
            assert report.due_retries == [record.id]

            payment_id, token = publisher.published[-1]
            assert (
                process_payment(container.runner(), payment_id, token, sleep=lambda _s: None)
                is ProcessResult.COMPLETED
            )
        assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
        assert provider.movements(record.id) == 1
    finally:
        container.close()


def test_sweep_once_on_the_command_line_prints_what_it_did(make_postgres_database, make_broker_url):
    database_url = make_postgres_database()
    # A vhost of its own: the sweeper leaves alone the newest waiting payments while the
    # queue holds ready messages (decision 0081), and another test's leftovers in a shared
    # queue would hold this one.
    broker_url = make_broker_url()
    container = build_container(database_url)
    try:
        [record] = expired_payments(container, new_merchant(container), 1, prefix="cli")
        env = cli_environment(database_url, broker_url)

        report = run_payorch_json("sweep", "--once", env=env)

        assert report["taken_over"] == [record.id]
        assert report["publish_failures"] == []
        assert reload(container, record.id).lease_token == record.lease_token + 1
        assert take_process_payment_messages(broker_url, payment_id=record.id) == [
            (record.id, record.lease_token + 1)
        ]
        assert run_payorch_json("sweep", "--once", env=env)["taken_over"] == []
    finally:
        container.close()
