"""Issue 41 (backlogs drain without amplification): real PostgreSQL, RabbitMQ, a ``payorch
sweeper`` process and a ``payorch worker`` process.

Before decision 0081, the sweeper re-published every payment whose dispatch lease ran out
while its wake-up waited in the queue, once per lease: a backlog five leases deep held about
six messages per payment.  Now it leaves alone what the queue may still hold; a wake-up taken
out of the queue (lost) is still re-dispatched once the queue no longer holds it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from itertools import pairwise

import kombu
import pytest
import sqlalchemy as sa

from orchestrator.broker import PAYMENTS_QUEUE, CeleryPublisher
from orchestrator.db.tables import lease_events, payments
from orchestrator.engine.publisher import QueueState
from tests.harness.stack import running_stack
from tests.support.processes import ProcessManager

PAYMENTS = 150
DISPATCH_LEASE_SECONDS = 1.0
LEASES_DEEP = 5


def wait_until(what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


def test_a_backlog_many_leases_deep_is_published_once_and_a_lost_wake_up_is_recovered(
    make_postgres_database, make_broker_url, processes: ProcessManager
) -> None:
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        dispatch_lease_seconds=DISPATCH_LEASE_SECONDS,
        sweep_interval_seconds=0.2,
    ) as stack:
        publisher = stack.container.publisher
        assert isinstance(publisher, CeleryPublisher)
        stack.start_sweeper(processes)
        ids = [stack.pay(f"backlog-{n}")["id"] for n in range(PAYMENTS)]
        # No worker yet: the backlog builds in the queue, one wake-up per payment.
        wait_until(
            "every wake-up queued", lambda: publisher.wake_up_queue() == QueueState(PAYMENTS, 0)
        )

        def leases_deep() -> float:
            with stack.container.engine.connect() as conn:
                newest = conn.execute(
                    sa.select(sa.func.max(payments.c.locked_until)).where(
                        payments.c.status == "processing"
                    )
                ).scalar_one()
                now = conn.execute(sa.select(sa.func.now())).scalar_one()
            return float((now - newest).total_seconds()) / DISPATCH_LEASE_SECONDS

        # The sweeper passes every 0.2 s while every dispatch lease runs out five times over.
        wait_until(f"{LEASES_DEEP} dispatch leases deep", lambda: leases_deep() >= LEASES_DEEP)
        assert publisher.wake_up_queue() == QueueState(PAYMENTS, 0)
        assert takeovers(stack) == 0
        assert {stack.record(i).lease_token for i in ids} == {1}

        # Lose the oldest wake-up: taken from the queue and never acknowledged to anyone.
        with kombu.Connection(stack.broker_url) as connection:
            message = connection.default_channel.basic_get(queue=PAYMENTS_QUEUE, no_ack=True)
        lost_id = json.loads(message.body)[0][0]
        assert lost_id in ids

        stack.start_worker(processes)
        for payment_id in ids:
            assert stack.wait_final(payment_id, timeout=180)["status"] == "succeeded"

        # A payment a worker claimed and deferred (on a loaded machine: its task's time
        # budget spent before the provider call) released its lease into the row, and the
        # sweeper's takeover is the one wake-up it needs: work, not amplification.  What
        # decision 0081 bounds is the rest, a wake-up published again while the first may
        # still be queued.
        histories = {payment_id: events(stack, payment_id) for payment_id in ids}
        after_defer = sum(answered_defers(history) for history in histories.values())
        defers = sum(history.count("defer") for history in histories.values())
        taken_over = takeovers(stack)
        amplified = taken_over - after_defer
        published = PAYMENTS + taken_over
        print(
            f"{published / PAYMENTS:.3f} messages per payment: {defers} deferred, "
            f"{after_defer} woken after a defer, {amplified} re-dispatched otherwise"
        )
        assert after_defer <= defers
        assert (PAYMENTS + amplified) / PAYMENTS <= 1.2, {
            payment_id: history
            for payment_id, history in histories.items()
            if "takeover" in history
        }
        # The lost one was re-dispatched (a sweeper's takeover, after a grace lease ran out
        # unclaimed; tests/integration/test_queue_horizon.py shows the grace), charged once.
        assert takeovers(stack, lost_id) == 1
        assert events(stack, lost_id)[:1] == ["takeover"]
        assert stack.movements(lost_id) == 1


def answered_defers(history: list[str]) -> int:
    """Takeovers in ``history`` (a payment's lease events) that came right after a defer."""
    return sum(1 for before, event in pairwise(history) if (before, event) == ("defer", "takeover"))


def events(stack, payment_id: str) -> list[str]:
    e = lease_events.c
    with stack.container.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(e.event).where(e.payment_id == payment_id).order_by(e.id)
            ).scalars()
        )


def takeovers(stack, payment_id: str | None = None) -> int:
    e = lease_events.c
    query = sa.select(sa.func.count()).where(e.event == "takeover")
    if payment_id is not None:
        query = query.where(e.payment_id == payment_id)
    with stack.container.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


pytestmark = pytest.mark.timeout(600)
