"""The console charts' aggregates (``ops.charts``, decision 0103) on SQLite and PostgreSQL,
over rows written at known instants: which bucket each one lands in (the window's edges
included, what lies outside left out), the percentiles, and the webhook backlog's running
sum."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import (
    outbox_events,
    payment_attempts,
    webhook_deliveries,
    webhook_endpoints,
)
from orchestrator.domain.chart_window import LAST_DAY, LAST_HOUR, Span
from orchestrator.domain.model import ApiClient
from orchestrator.ops.charts import read_charts
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, new_merchant
from tests.integration.webhook_helpers import MovableClock

# The database clock during the reads.  The last hour's buckets are 11:31 .. 12:30 (the
# last one holds NOW): bucket i starts at 11:31 + i minutes.
NOW = datetime(2026, 12, 5, 12, 30, 20, tzinfo=UTC)


def at(hour: int, minute: int, second: float = 0) -> datetime:
    whole = int(second)
    micro = round((second - whole) * 1_000_000)
    return datetime(2026, 12, 5, hour, minute, whole, micro, tzinfo=UTC)


@pytest.fixture
def container(database_url: str) -> Iterator[Container]:
    built = build_container(database_url, clock=MovableClock(NOW))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def merchant(container: Container) -> ApiClient:
    return new_merchant(container)


_keys = count()


def finished(
    container: Container,
    merchant: ApiClient,
    status: str,
    created: datetime,
    completed: datetime | None,
) -> str:
    record = accept(container, merchant, f"chart-{next(_keys)}")
    force(container, record.id, status=status, created_at=created, completed_at=completed)
    return record.id


def failover(container: Container, payment_id: str, number: int, ended: datetime) -> None:
    with container.uow() as uow:
        uow.session.write(
            sa.insert(payment_attempts).values(
                payment_id=payment_id,
                number=number,
                connector_account="ca_one",
                provider="stripe",
                status="failed",
                reason="provider_decline",
                proof="declined by the provider, nothing charged",
                next_connector_account="ca_two",
                started_at=ended - timedelta(seconds=1),
                ended_at=ended,
            )
        )
        uow.commit()


def endpoint(container: Container, merchant: ApiClient, status: str) -> str:
    endpoint_id = f"we_{status}"
    with container.uow() as uow:
        uow.session.write(
            sa.insert(webhook_endpoints).values(
                id=endpoint_id,
                client_id=merchant.id,
                url="https://receiver.example/hooks",
                events=["*"],
                status=status,
                secret_encrypted="not-used-by-the-charts",
                version=1,
                created_at=at(9, 0),
                updated_at=at(9, 0),
            )
        )
        uow.commit()
    return endpoint_id


def delivery(
    container: Container,
    payment_id: str,
    endpoint_id: str,
    status: str,
    created: datetime,
    settled: datetime | None = None,
) -> None:
    number = next(_keys)
    with container.uow() as uow:
        event_id = uow.session.scalar(
            sa.insert(outbox_events)
            .values(
                payment_id=payment_id,
                event_type="payment.succeeded",
                payload={},
                created_at=created,
                published_at=created,
                public_id=f"evt_chart_{number}",
                sequence=number,
            )
            .returning(outbox_events.c.id)
        )
        uow.session.write(
            sa.insert(webhook_deliveries).values(
                event_id=event_id,
                endpoint_id=endpoint_id,
                status=status,
                attempts=0 if settled is None else 1,
                window_started_at=created,
                lease_token=0,
                created_at=created,
                updated_at=settled or created,
                delivered_at=settled if status == "delivered" else None,
            )
        )
        uow.commit()


def test_the_span_ends_with_the_bucket_that_holds_now() -> None:
    hour = Span.ending_with(LAST_HOUR, NOW)
    assert (hour.start, hour.end, hour.count) == (at(11, 31), at(12, 31), 60)
    day = Span.ending_with(LAST_DAY, NOW)
    assert day.end == at(12, 45)
    assert day.start == at(12, 45) - timedelta(hours=24)


def test_payments_finished_land_in_their_minute_by_status_with_rate_and_percentiles(
    container: Container, merchant: ApiClient
) -> None:
    # Bucket 29 (12:00): two succeeded and one failed, taking 10 s, 70 s and 9.5 s.
    finished(container, merchant, "succeeded", at(12, 0, 0), at(12, 0, 10))
    finished(container, merchant, "succeeded", at(11, 59, 30), at(12, 0, 40))
    finished(container, merchant, "failed", at(12, 0, 50), at(12, 0, 59.5))
    # The window's first instant is inside it, the instant before is not.
    finished(container, merchant, "succeeded", at(11, 30), at(11, 31))
    finished(container, merchant, "succeeded", at(11, 30), at(11, 30, 59.9))
    # The current minute's first instant: bucket 59.
    finished(container, merchant, "canceled", at(12, 29), at(12, 30))
    # Not finished: no completed_at, not counted anywhere.
    finished(container, merchant, "processing", at(12, 10), None)
    finished(container, merchant, "requires_capture", at(12, 10), None)

    charts = read_charts(container.read_only_uow, LAST_HOUR)

    assert charts.span.start == at(11, 31)
    nonzero = {
        (status, i): n
        for status, series in charts.finished.items()
        for i, n in enumerate(series)
        if n
    }
    assert nonzero == {
        ("succeeded", 29): 2,
        ("failed", 29): 1,
        ("succeeded", 0): 1,
        ("canceled", 59): 1,
    }
    assert charts.success_rate[29] == pytest.approx(2 / 3)
    assert charts.success_rate[0] == 1.0
    assert charts.success_rate[59] == 0.0
    assert charts.success_rate[30] is None  # nothing finished: a gap, not 0 %
    # percentile_cont over [9.5, 10, 70]: the median is 10; the 95th lies 0.9 of the way
    # from 10 to 70 (position 0.95 * 2 = 1.9).
    assert charts.p50_seconds[29] == pytest.approx(10.0)
    assert charts.p95_seconds[29] == pytest.approx(64.0)
    assert charts.p50_seconds[0] == pytest.approx(60.0)
    assert charts.p95_seconds[59] == pytest.approx(60.0)
    assert sum(v is not None for v in charts.p50_seconds) == 3


def test_the_day_groups_the_same_rows_by_the_quarter_hour(
    container: Container, merchant: ApiClient
) -> None:
    finished(container, merchant, "succeeded", at(12, 0), at(12, 0, 10))
    finished(container, merchant, "failed", at(12, 10), at(12, 14, 59))
    finished(container, merchant, "succeeded", at(12, 14), at(12, 15))
    finished(container, merchant, "succeeded", at(0, 0), at(0, 1))  # 12 h ago

    charts = read_charts(container.read_only_uow, LAST_DAY)

    # The day's buckets start at 12:45 yesterday: 12:00-12:15 today is bucket 93, 12:15 is
    # 94's first instant (95, the last, holds NOW), and 00:00-00:15 is bucket 45.
    assert charts.span.start == at(12, 45) - timedelta(hours=24)
    assert charts.finished["succeeded"][93] == 1
    assert charts.finished["failed"][93] == 1
    assert charts.finished["succeeded"][94] == 1
    assert charts.finished["succeeded"][45] == 1
    assert sum(sum(series) for series in charts.finished.values()) == 4


def test_failovers_are_counted_in_the_minute_their_attempt_ended(
    container: Container, merchant: ApiClient
) -> None:
    payment = finished(container, merchant, "succeeded", at(11, 0), at(12, 30, 15))
    failover(container, payment, 1, at(12, 10, 5))
    failover(container, payment, 2, at(12, 10, 59))
    failover(container, payment, 3, at(11, 20))  # before the window
    failover(container, payment, 4, at(12, 30, 10))

    charts = read_charts(container.read_only_uow, LAST_HOUR)

    assert {i: n for i, n in enumerate(charts.failovers) if n} == {39: 2, 59: 1}


def test_the_webhook_backlog_is_what_was_pending_at_each_minutes_end(
    container: Container, merchant: ApiClient
) -> None:
    payment = finished(container, merchant, "succeeded", at(9, 0), at(9, 0, 1))
    enabled = endpoint(container, merchant, "enabled")
    disabled = endpoint(container, merchant, "disabled")
    # Pending since before the window: in the backlog from its start to now.
    delivery(container, payment, enabled, "pending", at(10, 0))
    # Created before the window, delivered in its minute 9 (11:40).
    delivery(container, payment, enabled, "delivered", at(11, 0), at(11, 40, 30))
    # Created in minute 34 (12:05), delivered in minute 35.
    delivery(container, payment, enabled, "delivered", at(12, 5, 10), at(12, 6))
    # Given up before the window: never pending in it.
    delivery(container, payment, enabled, "failed", at(10, 0), at(11, 10))
    # Created in minute 49 (12:20), still pending.
    delivery(container, payment, enabled, "pending", at(12, 20))
    # To an endpoint disabled now: not in the backlog, as payorch status counts it.
    delivery(container, payment, disabled, "pending", at(12, 0))

    charts = read_charts(container.read_only_uow, LAST_HOUR)

    expected = [2] * 9 + [1] * 25 + [2] + [1] * 14 + [2] * 11
    assert charts.webhook_backlog == expected
    with container.read_only_uow() as uow:
        assert uow.deliveries.stats().backlog == charts.webhook_backlog[-1]


def test_an_empty_database_draws_zeros_and_gaps(container: Container) -> None:
    charts = read_charts(container.read_only_uow, LAST_DAY)
    assert len(charts.failovers) == 96
    assert set(charts.failovers) == set(charts.webhook_backlog) == {0}
    assert all(sum(series) == 0 for series in charts.finished.values())
    assert set(charts.success_rate) == set(charts.p95_seconds) == {None}
