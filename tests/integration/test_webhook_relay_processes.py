"""Issue 13's acceptance: real PostgreSQL, real ``payorch relay`` processes, a receiver on
127.0.0.1 that verifies every signature with ``standardwebhooks``.

300 payments are finished through the production finishing code (the charge's finish
transaction, with the fake provider) while two relays run.  The receiver fails 30 % of
requests, hangs past the relay's timeout on 10 %, and goes down (drops every connection) in
the middle; one relay is SIGKILLed and restarted.  The outage and the kill are driven by
conditions (how many events arrived, how many connections were dropped), not by a clock.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import webhook_deliveries
from tests.fakes.provider import FakeProvider
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.seeds import new_merchant
from tests.integration.webhook_helpers import (
    attempt_rows,
    delivery_rows,
    event_ids,
    finished_payment,
)
from tests.support.plugin import DatabaseFactory
from tests.support.processes import ProcessManager
from tests.support.webhook_receiver import Behaviour, WebhookReceiver

PAYMENTS = 300
TIMEOUT = 1.0
RELAY_SETTINGS: dict[str, Any] = {
    "webhook_allow_private": True,
    "webhook_retry_base_seconds": 0.2,
    "webhook_retry_cap_seconds": 1.0,
    "webhook_connect_timeout_seconds": 0.5,
    "webhook_timeout_seconds": TIMEOUT,
    "webhook_lease_seconds": 4.0,
    "relay_concurrency": 4,
    "relay_idle_seconds": 0.1,
}


def relay_env(database_url: str) -> dict[str, str]:
    return {
        "PAYORCH_ENV": "test",
        "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
        "PAYORCH_DATABASE_URL": database_url,
        "PAYORCH_LOG_LEVEL": "INFO",
        "PAYORCH_DB_POOL_SIZE": "4",
        "PAYORCH_DB_MAX_OVERFLOW": "2",
        **{f"PAYORCH_{k.upper()}": str(v) for k, v in RELAY_SETTINGS.items()},
    }


def wait_until(condition, timeout: float, what: str, processes: ProcessManager) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached after {timeout}s\n{processes.describe(20)}")
        time.sleep(0.2)


def undelivered(container) -> int:
    with container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(webhook_deliveries)
                .where(webhook_deliveries.c.status != "delivered")
            ).scalar_one()
        )


def test_every_event_reaches_a_flaky_receiver_through_an_outage_a_kill_and_two_relays(
    make_postgres_database: DatabaseFactory, processes: ProcessManager
) -> None:
    # Its own database: the test counts every event in it (the session's shared database
    # holds other tests' events).
    postgres_url = make_postgres_database()
    container = build_container(postgres_url, provider=FakeProvider(), **RELAY_SETTINGS)
    behaviour = Behaviour(fail_share=0.3, hang_share=0.1, hang_seconds=TIMEOUT + 0.5, seed=42)
    env = relay_env(postgres_url)
    try:
        with WebhookReceiver(behaviour) as receiver:
            merchant = new_merchant(container)
            created = container.endpoint_service().create(
                merchant.id, url=receiver.url, events=["*"], description="acceptance"
            )
            receiver.secrets.append(created.secret)
            relay_a = processes.payorch("relay", name="relay-a", env=env)
            relay_b = processes.payorch("relay", name="relay-b", env=env)

            for n in range(PAYMENTS):
                method = "pm_card_chargeDeclined" if n % 5 == 0 else "pm_card_visa"
                finished_payment(container, merchant, f"acc-{n}", payment_method=method)
                if n == PAYMENTS // 3:
                    # The outage, once a third of the events arrived.
                    receiver.wait_for(lambda r: len(r.delivered_ids()) >= 60, timeout=120)
                    receiver.go_down()
                    down_at = time.monotonic()
                    # Down until the relays kept retrying into it for a while: many dropped
                    # connections, and some event dropped three times (retried through it).
                    receiver.wait_for(
                        lambda r: r.dropped >= 150 and max(Counter(r.dropped_ids).values()) >= 3,
                        timeout=120,
                    )
                    receiver.come_back()
                    outage_seconds = time.monotonic() - down_at
                if n == 2 * PAYMENTS // 3:
                    # A crash: relay A dies with whatever it had in flight.
                    receiver.wait_for(lambda r: len(r.delivered_ids()) >= 150, timeout=120)
                    assert relay_a.kill() == -9
                    relay_a2 = processes.payorch("relay", name="relay-a2", env=env)

            ids = event_ids(container)
            assert len(ids) == PAYMENTS
            wait_until(
                lambda: receiver.delivered_ids() >= set(ids) and undelivered(container) == 0,
                timeout=300,
                what="every event delivered",
                processes=processes,
            )
            assert relay_b.running and relay_a2.running

        # Every event reached the receiver with a signature it verified; none failed to verify.
        assert receiver.delivered_ids() == set(ids)
        assert receiver.unverified() == []
        # Nothing left undelivered.
        deliveries = delivery_rows(container)
        assert len(deliveries) == PAYMENTS
        assert {d.status for d in deliveries} == {"delivered"}

        attempts = attempt_rows(container)
        # No delivery was attempted by two relays at the same time: per delivery, every
        # attempt ended before the next one began (intervals on the relays' clock).
        by_delivery: dict[int, list[Any]] = defaultdict(list)
        for attempt in attempts:
            by_delivery[attempt.delivery_id].append(attempt)
        for delivery_id, tries in by_delivery.items():
            tries.sort(key=lambda a: a.started_at)
            for earlier, later in itertools.pairwise(tries):
                ended = earlier.started_at + timedelta(milliseconds=earlier.latency_ms)
                assert ended <= later.started_at, (delivery_id, earlier, later)
            assert [a.attempt for a in tries] == sorted(a.attempt for a in tries)
        # The faults happened, and every relay did part of the work.
        outcomes = {a.outcome for a in attempts}
        assert {"delivered", "http_error", "timeout"} <= outcomes, outcomes
        assert outcomes & {"connect_error", "error"}, outcomes  # the outage
        assert {a.relay.split(":")[2] for a in attempts} >= {str(relay_b.pid), str(relay_a2.pid)}
        assert len({a.relay for a in attempts}) >= 3  # A, B and A's successor
        assert receiver.dropped >= 150
        print(
            f"{len(attempts)} recorded attempts, {len(receiver.received)} requests seen, "
            f"{receiver.dropped} dropped in a {outage_seconds:.1f} s outage"
        )
    finally:
        container.close()


pytestmark = pytest.mark.timeout(600)
