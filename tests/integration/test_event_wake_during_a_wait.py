"""A provider event wakes a payment whose worker is writing its wait at that very moment
(PostgreSQL).  The wake was two statements, "waiting, nobody holds it: due now" then "held:
keep the wake-up in woken_at"; a wait committing between them lost it.  The first read the
row still held and passed it by; the second, blocked on the wait's row lock, re-checked the
row as the wait left it (released) and passed it by too.  The payment then sat out its
re-check: in the failover chaos run, a technical cancel's notification stored that instant
left the payment waiting five minutes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import payments
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant

pytestmark = pytest.mark.postgres


@pytest.fixture
def container(make_postgres_database) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    yield built
    built.close()


def waiting_on_a_lock(container: Container, pid: int) -> bool:
    with container.engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid},
            ).scalar()
        )


def test_a_wake_up_blocked_by_a_committing_wait_makes_the_payment_due(
    container: Container,
) -> None:
    payment = accept(container, new_merchant(container), "wake-1")
    with container.engine.begin() as conn:
        conn.execute(
            payments.update().where(payments.c.id == payment.id).values(lease_owner="vm:4242")
        )

    woke: list[bool] = []
    waker_pid: list[int] = []

    def wake() -> None:
        with container.uow() as uow:
            backend = uow.session.one(sa.select(sa.func.pg_backend_pid().label("pid")))
            assert backend is not None
            waker_pid.append(int(backend["pid"]))
            woke.append(uow.provider_events.make_deferred_payment_due(payment.id, now=uow.now()))
            uow.commit()

    # The worker's wait, not yet committed: released, due at its re-check.
    with container.engine.connect() as worker:
        worker.execute(
            payments.update()
            .where(payments.c.id == payment.id)
            .values(
                lease_owner=None,
                next_attempt_at=sa.func.now() + sa.literal_column("interval '300 seconds'"),
                locked_until=sa.func.now() + sa.literal_column("interval '300 seconds'"),
            )
        )
        waker = threading.Thread(target=wake)
        waker.start()
        deadline = time.monotonic() + 30
        while not (waker_pid and waiting_on_a_lock(container, waker_pid[0])):
            assert waker.is_alive() and time.monotonic() < deadline, "the wake never waited"
            time.sleep(0.02)
        worker.commit()
    waker.join(30)

    with container.engine.connect() as conn:
        row = conn.execute(
            sa.select(payments.c.next_attempt_at, sa.func.now().label("now")).where(
                payments.c.id == payment.id
            )
        ).one()
    assert woke == [True]
    assert row.next_attempt_at <= row.now  # due now, not at the re-check
