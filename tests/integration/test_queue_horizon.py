"""The sweeper's backlog rule (decision 0081) with a publisher that reports the queue:
expired dispatch leases whose wake-up the queue may still hold are left alone, older ones
are re-dispatched, a grace lease comes first while a consumer is attached, and a broker that
cannot say falls back to re-dispatching everything.  The process test with RabbitMQ is
``test_deep_backlog.py``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import payments
from orchestrator.engine import queue_horizon
from orchestrator.engine.publisher import QueueDepthProbe, QueueState
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload

WAITING = 10


class QueueReportingPublisher(RecordingPublisher):
    def __init__(self) -> None:
        super().__init__()
        self.queue: QueueState | None = None

    def wake_up_queue(self) -> QueueState | None:
        return self.queue


@pytest.fixture
def publisher() -> QueueReportingPublisher:
    return QueueReportingPublisher()


@pytest.fixture
def container(database_url: str, publisher: QueueReportingPublisher) -> Iterator[Container]:
    built = build_container(database_url, publisher=publisher)
    yield built
    built.close()


@pytest.fixture(autouse=True)
def small_allowances(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ten rows instead of hundreds: no dispatcher lag, two wake-ups per consumer.
    monkeypatch.setattr(queue_horizon, "DISPATCH_LAG_ALLOWANCE", 0)
    monkeypatch.setattr(queue_horizon, "PREFETCH_PER_CONSUMER", 2)


def waiting_backlog(container: Container) -> list[str]:
    """WAITING accepted payments, oldest first, each dispatch lease expired (a second apart,
    in accept order: the order their wake-ups entered the queue)."""
    merchant = new_merchant(container)
    ids = [accept(container, merchant, f"backlog-{n}").id for n in range(WAITING)]
    with container.uow() as uow:
        now = uow.now()
        for n, payment_id in enumerate(ids):
            uow.session.execute(
                payments.update()
                .where(payments.c.id == payment_id)
                .values(locked_until=now - timedelta(seconds=60 - n))
            )
        uow.commit()
    return ids


def expire(container: Container, ids: list[str]) -> None:
    with container.uow() as uow:
        now = uow.now()
        uow.session.execute(
            payments.update()
            .where(payments.c.id.in_(ids))
            .values(locked_until=now - timedelta(seconds=1))
        )
        uow.commit()


def owners(container: Container, ids: list[str]) -> list[str | None]:
    with container.engine.connect() as conn:
        found = dict(
            conn.execute(
                sa.select(payments.c.id, payments.c.lease_owner).where(payments.c.id.in_(ids))
            ).all()
        )
    return [found[i] for i in ids]


def test_the_publisher_reports_the_queue(publisher: QueueReportingPublisher) -> None:
    assert isinstance(publisher, QueueDepthProbe)
    assert not isinstance(RecordingPublisher(), QueueDepthProbe)


def test_the_newest_ready_count_of_waiting_rows_is_left_alone(container, publisher) -> None:
    ids = waiting_backlog(container)
    publisher.published.clear()  # the accepts' own wake-ups
    publisher.queue = QueueState(ready=3, consumers=0)

    report = container.sweeper().run_once()

    # The queue holds at most the wake-ups of the 3 newest: the 7 older ones were lost.
    assert sorted(report.taken_over) == sorted(ids[:7])
    assert report.graced == []
    assert sorted(p for p, _ in publisher.published) == sorted(ids[:7])
    assert [reload(container, i).lease_token for i in ids[7:]] == [1, 1, 1]
    # The 7 new wake-ups are queued behind the 3: every waiting row's wake-up may be there,
    # and nothing is re-dispatched, however often the sweeper passes.
    publisher.queue = QueueState(ready=10, consumers=0)
    assert container.sweeper().run_once().requeued == []
    assert container.sweeper().run_once().requeued == []


def test_a_full_queue_holds_every_waiting_row(container, publisher) -> None:
    waiting_backlog(container)
    publisher.published.clear()  # the accepts' own wake-ups
    publisher.queue = QueueState(ready=WAITING, consumers=0)

    report = container.sweeper().run_once()

    assert report.taken_over == [] and report.graced == [] and publisher.published == []


def test_a_released_row_that_is_due_is_re_dispatched_behind_a_full_queue(
    container, publisher
) -> None:
    """A deferred retry or a released circuit wait (no owner: its lease went back to the
    row) has no wake-up in the queue, however many the queue holds: it is due at once.
    ``NOT (lease_owner IN …)`` alone is NULL for it, which left it out of every pass until
    the queue ran empty (the drain after an outage, paced by the sweep interval)."""
    ids = waiting_backlog(container)
    released = ids[2]
    with container.uow() as uow:
        uow.session.execute(
            payments.update().where(payments.c.id == released).values(lease_owner=None)
        )
        uow.commit()
    publisher.published.clear()  # the accepts' own wake-ups
    publisher.queue = QueueState(ready=WAITING, consumers=0)

    report = container.sweeper().run_once()

    assert report.taken_over == [released]
    assert [p for p, _ in publisher.published] == [released]
    assert reload(container, released).lease_token == 2


def test_with_a_consumer_attached_a_grace_lease_comes_before_the_re_dispatch(
    container, publisher
) -> None:
    ids = waiting_backlog(container)
    publisher.published.clear()  # the accepts' own wake-ups
    # 3 ready + 2 a consumer may hold unclaimed: the 5 newest are left alone.
    publisher.queue = QueueState(ready=3, consumers=1)

    first = container.sweeper().run_once()

    assert first.taken_over == [] and publisher.published == []
    assert sorted(first.graced) == sorted(ids[:5])
    assert owners(container, ids[:5]) == ["dispatch:grace"] * 5
    # Same token: a wake-up a worker already holds still claims the row.
    assert [reload(container, i).lease_token for i in ids[:5]] == [1] * 5

    # The grace runs out unclaimed: now re-dispatched, once.
    expire(container, ids[:5])
    second = container.sweeper().run_once()

    assert sorted(second.taken_over) == sorted(ids[:5])
    assert second.graced == []
    assert sorted(publisher.published) == sorted((i, 2) for i in ids[:5])


def test_an_empty_queue_without_consumers_re_dispatches_at_once(container, publisher) -> None:
    ids = waiting_backlog(container)
    publisher.published.clear()  # the accepts' own wake-ups
    publisher.queue = QueueState(ready=0, consumers=0)

    assert sorted(container.sweeper().run_once().taken_over) == sorted(ids)


def test_a_broker_that_cannot_say_falls_back_to_re_dispatching_every_expired_lease(
    container, publisher
) -> None:
    ids = waiting_backlog(container)
    publisher.published.clear()  # the accepts' own wake-ups
    publisher.queue = None

    report = container.sweeper().run_once()

    assert sorted(report.taken_over) == sorted(ids)
    assert report.graced == []
