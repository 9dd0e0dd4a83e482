"""The console's charts page (``/ops/charts?window=1h|24h``, decision 0103): the reads of
``ops.charts`` drawn as server-side SVG figures (``chart_figures``, ``_chart.html``).  The
window switch is two links; no script draws anything.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.api.console.chart_figures import Buckets, Figure, bar_figure, line_figure
from orchestrator.api.console.guard import CurrentUser
from orchestrator.api.console.rendering import render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.domain.chart_window import LAST_HOUR, WINDOWS
from orchestrator.ops.charts import Charts, read_charts

router = APIRouter(prefix="/ops", include_in_schema=False)


@router.get("/charts")
def charts(
    request: Request, container: ContainerDep, user: CurrentUser, window: str | None = None
) -> Response:
    # An unknown window shows the last hour, as the payments page ignores an unknown status:
    # the page is reached by its own links, and a stale bookmark should still open.
    chosen = WINDOWS.get(window or "", LAST_HOUR)
    read = read_charts(container.read_only_uow, chosen)
    return render_page(
        request,
        "charts.html",
        user,
        page="charts",
        charts=read,
        windows=list(WINDOWS.values()),
        figures=figures(read),
        bucket_minutes=int(chosen.bucket.total_seconds() // 60),
    )


def figures(charts: Charts) -> list[Figure]:
    span = charts.span
    buckets = Buckets(span.start, span.width, span.count)
    per = "minute" if span.width_seconds == 60 else f"{span.width_seconds // 60} minutes"
    return [
        bar_figure(
            key="finished",
            title=f"Payments finished per {per}, by status",
            description=(
                "Payments that reached a final status in each interval, stacked by that "
                "status (succeeded, failed, canceled)."
            ),
            y_label="payments",
            buckets=buckets,
            series=list(charts.finished.items()),
        ),
        line_figure(
            key="success-rate",
            title="Success rate",
            description="Succeeded over all finished payments in each interval.",
            y_label="succeeded",
            buckets=buckets,
            series=[("success rate", charts.success_rate)],
            fmt=_percent,
            top=1.0,
        ),
        line_figure(
            key="time-to-final",
            title="Time to final status (p50, p95)",
            description=(
                "Median and 95th percentile of the seconds from a payment's accept to its "
                "final status, for the payments finished in each interval."
            ),
            y_label="seconds",
            buckets=buckets,
            series=[("p50", charts.p50_seconds), ("p95", charts.p95_seconds)],
            fmt=_seconds,
        ),
        bar_figure(
            key="failovers",
            title=f"Failovers per {per}",
            description="Attempts that ended in a failover to the route's next account.",
            y_label="failovers",
            buckets=buckets,
            series=[("failovers", charts.failovers)],
        ),
        line_figure(
            key="webhook-backlog",
            title="Webhook backlog",
            description=(
                "Deliveries pending to enabled endpoints at the end of each interval; the "
                "last point is now."
            ),
            y_label="deliveries",
            buckets=buckets,
            series=[("pending", [float(v) for v in charts.webhook_backlog])],
            fmt=_whole,
            whole=True,
        ),
    ]


def _percent(value: float) -> str:
    return f"{value * 100:.3g}%"


def _seconds(value: float) -> str:
    if value == 0:
        return "0 s"
    if value >= 10:
        return f"{value:.0f} s"
    return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"


def _whole(value: float) -> str:
    return f"{value:g}"
