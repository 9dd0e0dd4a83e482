"""Issue 41 (the relay keeps every merchant flowing): real PostgreSQL, a real ``payorch
relay`` process, one merchant's endpoint trickling its response headers a byte a second and
another merchant's endpoint healthy.

Before the attempt deadline and the per-endpoint attempt lease, an attempt against the
trickling endpoint lasted as long as the endpoint liked (httpx's read timeout restarts with
every byte) and ended "delivered"; with two relay threads, two such attempts stopped every
other merchant's webhooks.
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import webhook_deliveries, webhook_delivery_attempts
from tests.fakes.provider import FakeProvider
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.seeds import new_merchant
from tests.integration.trickle_server import TrickleServer
from tests.integration.webhook_helpers import finished_payment
from tests.support.plugin import DatabaseFactory
from tests.support.processes import ProcessManager
from tests.support.webhook_receiver import WebhookReceiver

CONNECT_TIMEOUT = 0.5
TIMEOUT = 2.0
DEADLINE_MS = int((CONNECT_TIMEOUT + TIMEOUT) * 1000)
SLOW_EVENTS = 6
HEALTHY_EVENTS = 10
# "Within seconds": one trickled answer alone would take ~70 s (a byte a second).
HEALTHY_WITHIN_SECONDS = 8.0
RELAY_SETTINGS: dict[str, Any] = {
    "webhook_allow_private": True,
    "webhook_retry_base_seconds": 0.5,
    "webhook_retry_cap_seconds": 1.0,
    "webhook_connect_timeout_seconds": CONNECT_TIMEOUT,
    "webhook_timeout_seconds": TIMEOUT,
    "webhook_lease_seconds": 6.0,
    # Two threads: without the endpoint's attempt lease, the slow endpoint's six due
    # deliveries would hold both.
    "relay_concurrency": 2,
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


def attempts_of(container: Any, endpoint_id: str) -> list[Any]:
    a, d = webhook_delivery_attempts.c, webhook_deliveries.c
    with container.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(webhook_delivery_attempts)
                .join(webhook_deliveries, d.id == a.delivery_id)
                .where(d.endpoint_id == endpoint_id)
                .order_by(a.started_at)
            )
        )


def deliveries_of(container: Any, endpoint_id: str) -> list[Any]:
    d = webhook_deliveries.c
    with container.engine.connect() as conn:
        return list(conn.execute(sa.select(webhook_deliveries).where(d.endpoint_id == endpoint_id)))


def wait_until(condition: Any, timeout: float, what: str, processes: ProcessManager) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached after {timeout}s\n{processes.describe(20)}")
        time.sleep(0.1)


def test_a_trickling_endpoint_costs_one_attempt_at_a_time_each_ending_at_its_deadline(
    make_postgres_database: DatabaseFactory, processes: ProcessManager
) -> None:
    postgres_url = make_postgres_database()
    container = build_container(postgres_url, provider=FakeProvider(), **RELAY_SETTINGS)
    try:
        with TrickleServer(byte_interval=1.0) as slow, WebhookReceiver() as healthy:
            slow_merchant = new_merchant(container)
            healthy_merchant = new_merchant(container)
            endpoints = container.endpoint_service()
            slow_endpoint = endpoints.create(
                slow_merchant.id, url=slow.url, events=["*"], description="trickles"
            )
            healthy_endpoint = endpoints.create(
                healthy_merchant.id, url=healthy.url, events=["*"], description="healthy"
            )
            healthy.secrets.append(healthy_endpoint.secret)
            for n in range(SLOW_EVENTS):
                finished_payment(container, slow_merchant, f"slow-{n}")
            processes.payorch("relay", name="relay", env=relay_env(postgres_url))

            # The slow endpoint is being attempted: from now on it holds what it can.
            wait_until(lambda: slow.snapshot(), 20, "a slow attempt", processes)
            started = time.monotonic()
            for n in range(HEALTHY_EVENTS):
                finished_payment(container, healthy_merchant, f"healthy-{n}")
            healthy.wait_for(
                lambda r: len(r.delivered_ids()) == HEALTHY_EVENTS, timeout=HEALTHY_WITHIN_SECONDS
            )
            healthy_seconds = time.monotonic() - started
            # Retried with backoff: some slow delivery was attempted twice, and several
            # attempts ended (the relay recorded them).
            wait_until(
                lambda: (
                    len(attempts_of(container, slow_endpoint.endpoint.id)) >= 4
                    and max(d.attempts for d in deliveries_of(container, slow_endpoint.endpoint.id))
                    >= 2
                ),
                40,
                "slow attempts retried",
                processes,
            )
            connections = slow.snapshot()
            max_open = slow.max_open

        assert healthy.unverified() == []
        slow_attempts = attempts_of(container, slow_endpoint.endpoint.id)
        # Each slow attempt ended at its deadline, as a timeout, never "delivered".
        assert {a.outcome for a in slow_attempts} == {"timeout"}
        for attempt in slow_attempts:
            assert DEADLINE_MS <= attempt.latency_ms < DEADLINE_MS + 2000, attempt
            assert "deadline" in attempt.error
        assert all(
            d.status == "pending" for d in deliveries_of(container, slow_endpoint.endpoint.id)
        )
        # The endpoint's side agrees: connections closed by the relay after about the
        # deadline (the trickle alone would last over a minute).
        closed = [c for c in connections if c.closed is not None]
        assert len(closed) >= len(slow_attempts) - 1
        assert all(c.closed - c.opened < DEADLINE_MS / 1000 + 2.0 for c in closed)
        # One attempt in flight at a time for the endpoint, by the endpoint's count and by
        # the recorded intervals.
        assert max_open == 1
        for earlier, later in itertools.pairwise(slow_attempts):
            ended = earlier.started_at + timedelta(milliseconds=earlier.latency_ms)
            assert ended <= later.started_at, (earlier, later)
        print(
            f"healthy: {HEALTHY_EVENTS} events in {healthy_seconds:.1f} s; slow: "
            f"{len(slow_attempts)} attempts, latencies "
            f"{sorted(a.latency_ms for a in slow_attempts)} ms"
        )
    finally:
        container.close()


pytestmark = pytest.mark.timeout(300)


def test_the_sender_closes_a_trickling_answer_at_the_deadline_whatever_the_read_timeout() -> None:
    from orchestrator.domain.webhooks import AttemptOutcome
    from orchestrator.events.sender import WebhookSender

    sender = WebhookSender(
        allow_private=True,
        resolver=lambda host, port: ["127.0.0.1"],
        connect_timeout=0.2,
        # Each byte comes within the read timeout: only the deadline can end the attempt.
        timeout=0.6,
        max_response_bytes=1024,
    )
    try:
        with TrickleServer(byte_interval=0.25) as slow:
            result = sender.send(slow.url, "{}", {})
            # The server sees the shutdown a moment later, on its own thread.
            give_up = time.monotonic() + 5
            while slow.snapshot()[0].closed is None and time.monotonic() < give_up:
                time.sleep(0.01)
            [connection] = slow.snapshot()
    finally:
        sender.close()
    assert result.outcome is AttemptOutcome.TIMEOUT and result.status_code is None
    assert 800 <= result.latency_ms < 800 + 1000
    assert result.error is not None and "deadline (0.8 s)" in result.error
    assert connection.closed is not None
