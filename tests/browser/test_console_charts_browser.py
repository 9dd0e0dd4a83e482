"""Issue 44's charts in a real browser (Debian's Chromium), on PostgreSQL (the queries'
``width_bucket`` / ``percentile_cont`` path): the server-drawn SVGs show the seeded
payments, failovers and webhook backlog with one mark per value, the 24 h link redraws them
by the quarter hour, and the page loads nothing from another host."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.browser.test_console_pages import SCREENSHOTS
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.test_chart_queries import delivery, endpoint, failover, finished
from tests.integration.webhook_helpers import client_of


@pytest.fixture
def api(make_postgres_database) -> Iterator[Api]:
    with running_api(make_postgres_database()) as running:
        yield running


def seed(api: Api) -> None:
    """Rows at instants relative to now, spaced so that which bucket each lands in does not
    matter, only which share one: 30 minutes apart are always two quarter hours apart."""
    merchant = client_of(api.container, api.client_a_id)
    now = datetime.now(UTC)

    def ago(minutes: float, seconds: float = 0) -> datetime:
        return now - timedelta(minutes=minutes, seconds=seconds)

    recent = finished(api.container, merchant, "succeeded", ago(10, 20), ago(10))
    finished(api.container, merchant, "failed", ago(40, 2), ago(40))
    finished(api.container, merchant, "succeeded", ago(41), ago(40))
    finished(api.container, merchant, "succeeded", ago(180, 5), ago(180))  # outside the hour
    failover(api.container, recent, 1, ago(10, 30))
    failover(api.container, recent, 2, ago(10, 30))
    failover(api.container, recent, 3, ago(40))
    hooks = endpoint(api.container, merchant, "enabled")
    delivery(api.container, recent, hooks, "pending", ago(15))


def marks(console, chart: str, selector: str) -> int:
    return console.page.locator(f'svg[data-chart="{chart}"] {selector}').count()


def test_the_charts_draw_the_last_hour_and_day_from_the_rows(api, open_console) -> None:
    seed(api)
    console = open_console(api.url)
    # A CSP refusal (an inline style or script, say) is reported on the page's console.
    refusals: list[str] = []
    console.page.on(
        "console",
        lambda m: refusals.append(m.text) if "Content Security Policy" in m.text else None,
    )
    console.sign_in(api.ops_key)
    console.page.get_by_role("link", name="Charts").click()
    console.page.wait_for_url("**/ops/charts")

    assert console.page.locator("svg.chart-svg").count() == 5
    # Payments finished: succeeded at -10 min; succeeded and failed stacked at -40 min.
    assert marks(console, "finished", "rect.bar") == 3
    assert marks(console, "finished", "rect.bar.series-failed") == 1
    # One point per minute in which anything finished; two lines (p50, p95) for latency.
    assert marks(console, "success-rate", "circle.point") == 2
    assert marks(console, "time-to-final", "circle.point") == 4
    assert marks(console, "time-to-final", "polyline.series-p95") == 2  # a gap between
    # Two failovers in one minute, one in another.
    assert marks(console, "failovers", "rect.bar") == 2
    titles = console.page.locator('svg[data-chart="failovers"] rect.bar title')
    assert sorted(t.split(": ")[1] for t in titles.all_text_contents()) == ["1", "2"]
    # The backlog: a point per minute; nothing pending an hour ago, one pending now.
    backlog = console.page.locator('svg[data-chart="webhook-backlog"] circle.point title')
    assert backlog.count() == 60
    assert backlog.first.text_content().endswith("pending: 0")
    assert backlog.last.text_content().endswith("pending: 1")
    assert console.page.locator("svg text.no-data").count() == 0
    # The numbers are there as text too (the rate of the -40 min minute: 1 of 2).
    console.page.locator("#chart-success-rate summary").click()
    assert "50%" in console.text("#chart-success-rate table")
    console.screenshot(SCREENSHOTS / "charts.png")

    console.page.get_by_role("link", name="Last 24 hours").click()
    console.page.wait_for_url("**/ops/charts?window=24h")
    assert console.page.locator("#window-24h").get_attribute("aria-current") == "page"
    # The payment of three hours ago is in the day: four bars in three quarter hours.
    assert marks(console, "finished", "rect.bar") == 4
    assert marks(console, "success-rate", "circle.point") == 3
    assert marks(console, "webhook-backlog", "circle.point") == 96

    assert console.foreign_requests == []
    assert refusals == []


def test_an_empty_database_shows_no_data_rather_than_empty_axes(api, open_console) -> None:
    console = open_console(api.url)
    console.sign_in(api.ops_key)
    console.open("/ops/charts?window=24h")
    for chart in ("finished", "success-rate", "time-to-final", "failovers"):
        assert marks(console, chart, "text.no-data") == 1, chart
        assert marks(console, chart, "rect.bar") == 0, chart
        assert marks(console, chart, "circle.point") == 0, chart
    # No backlog is a backlog of zero, drawn.
    assert marks(console, "webhook-backlog", "circle.point") == 96
    # A window the page does not offer (a stale bookmark, say) shows the last hour.
    console.open("/ops/charts?window=7d")
    assert console.page.locator("#window-1h").get_attribute("aria-current") == "page"
    assert marks(console, "webhook-backlog", "circle.point") == 60
