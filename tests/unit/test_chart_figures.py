"""The console's server-drawn charts (decision 0103): values to coordinates, gaps for
missing values, "no data" for an empty window, the text fallback, escaping, and the window's
buckets and percentiles."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.api.console.chart_figures import (
    PLOT_BOTTOM,
    PLOT_HEIGHT,
    PLOT_LEFT,
    PLOT_TOP,
    PLOT_WIDTH,
    Buckets,
    bar_figure,
    line_figure,
    nice_top,
)
from orchestrator.api.console.rendering import TEMPLATES
from orchestrator.domain.chart_window import LAST_DAY, LAST_HOUR, Span, percentile_cont

START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
FOUR = Buckets(START, timedelta(minutes=1), 4)


def render(figure: object) -> str:
    return str(TEMPLATES.env.get_template("_chart.html").module.chart(figure))  # type: ignore[attr-defined]


def plain(value: float) -> str:
    return f"{value:g}"


@pytest.mark.parametrize(
    ("largest", "top"),
    [(0, 1), (-3, 1), (1, 1), (3, 5), (7, 10), (10, 10), (11, 20), (0.3, 0.5), (260, 500)],
)
def test_the_scale_tops_at_one_two_or_five_times_a_power_of_ten(largest, top) -> None:
    assert nice_top(largest) == pytest.approx(top)


def test_stacked_bars_fill_their_bucket_from_the_axis_up() -> None:
    figure = bar_figure(
        key="finished",
        title="Finished",
        description="d",
        y_label="payments",
        buckets=FOUR,
        series=[("succeeded", [0, 3, 0, 10]), ("failed", [0, 2, 0, 0])],
    )
    # Totals 0, 5, 0, 10: the scale tops at 10, one unit is PLOT_HEIGHT / 10.
    unit = PLOT_HEIGHT / 10
    slot = PLOT_WIDTH / 4
    succeeded_1, failed_1, succeeded_3 = figure.bars
    assert succeeded_1.series == "succeeded"
    assert succeeded_1.x == pytest.approx(PLOT_LEFT + slot * 1.1, abs=0.05)
    assert succeeded_1.width == pytest.approx(slot * 0.8, abs=0.05)
    assert succeeded_1.y + succeeded_1.height == pytest.approx(PLOT_BOTTOM, abs=0.1)
    assert succeeded_1.height == pytest.approx(3 * unit, abs=0.1)
    # The failed bar sits on the succeeded one.
    assert failed_1.series == "failed"
    assert failed_1.y + failed_1.height == pytest.approx(succeeded_1.y, abs=0.1)
    assert failed_1.height == pytest.approx(2 * unit, abs=0.1)
    # The largest total reaches the top of the plot.
    assert succeeded_3.y == pytest.approx(PLOT_TOP, abs=0.1)
    assert succeeded_3.title == "12:03 · succeeded: 10"
    assert [t.label for t in figure.y_ticks] == ["0", "5", "10"]
    # The table lists the buckets that have anything.
    assert [(r.bucket, r.values) for r in figure.rows] == [
        ("2026-12-05 12:01", ("3", "2")),
        ("2026-12-05 12:03", ("10", "0")),
    ]


def test_a_line_puts_each_value_mid_bucket_and_breaks_where_a_value_is_missing() -> None:
    figure = line_figure(
        key="rate",
        title="Success rate",
        description="d",
        y_label="succeeded",
        buckets=FOUR,
        series=[("success rate", [1.0, 0.5, None, 0.0])],
        fmt=plain,
        top=1.0,
    )
    (line,) = figure.lines
    xs = [p.x for p in line.points]
    ys = [p.y for p in line.points]
    slot = PLOT_WIDTH / 4
    assert xs == pytest.approx([PLOT_LEFT + slot * k for k in (0.5, 1.5, 3.5)], abs=0.05)
    assert ys == pytest.approx([PLOT_TOP, PLOT_TOP + PLOT_HEIGHT / 2, PLOT_BOTTOM], abs=0.05)
    # Two runs: buckets 0-1, then bucket 3 alone; no line is drawn through the gap.
    assert len(line.segments) == 2
    assert line.segments[0] == f"{xs[0]},{ys[0]} {xs[1]},{ys[1]}"
    assert line.segments[1] == f"{xs[2]},{ys[2]}"
    assert [r.values for r in figure.rows] == [("1",), ("0.5",), ("0",)]


def test_an_empty_window_says_no_data_in_the_figure_and_its_text() -> None:
    figure = line_figure(
        key="latency",
        title="Time to final",
        description="Seconds.",
        y_label="seconds",
        buckets=FOUR,
        series=[("p50", [None] * 4), ("p95", [None] * 4)],
        fmt=plain,
    )
    assert figure.empty
    html = render(figure)
    assert re.search(r'<text class="no-data"[^>]*>no data</text>', html)
    assert "No data in this window." in html
    assert "<circle" not in html and "<polyline" not in html
    bars = bar_figure(
        key="failovers",
        title="Failovers",
        description="d",
        y_label="failovers",
        buckets=FOUR,
        series=[("failovers", [0, 0, 0, 0])],
    )
    assert bars.empty and bars.bars == ()
    assert ">no data</text>" in render(bars)


def test_the_svg_has_a_title_a_description_and_the_numbers_as_a_table() -> None:
    html = render(
        bar_figure(
            key="failovers",
            title="Failovers per minute",
            description="Attempts that failed over.",
            y_label="failovers",
            buckets=FOUR,
            series=[("failovers", [0, 2, 0, 1])],
        )
    )
    assert 'role="img"' in html
    assert 'aria-labelledby="chart-failovers-title chart-failovers-desc"' in html
    assert '<title id="chart-failovers-title">Failovers per minute</title>' in html
    assert '<desc id="chart-failovers-desc">Attempts that failed over.</desc>' in html
    assert html.count('<rect class="bar series-failovers"') == 2
    rows = re.findall(r'<tr><th scope="row">([^<]*)</th><td class="num">([^<]*)</td></tr>', html)
    assert rows == [("2026-12-05 12:01", "2"), ("2026-12-05 12:03", "1")]
    assert "no data" not in html


def test_text_in_a_figure_is_escaped() -> None:
    html = render(
        bar_figure(
            key="x",
            title="<script>alert(1)</script>",
            description="a & b",
            y_label="<b>",
            buckets=FOUR,
            series=[("<i>", [1, 0, 0, 0])],
        )
    )
    assert "<script>" not in html and "<b>" not in html and "<i>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a &amp; b" in html


def test_the_windows_buckets_are_aligned_to_the_clock() -> None:
    now = datetime(2026, 12, 5, 12, 30, 20, tzinfo=UTC)
    hour = Span.ending_with(LAST_HOUR, now)
    assert hour.starts()[-1] == datetime(2026, 12, 5, 12, 30, tzinfo=UTC)
    assert hour.starts()[0] == datetime(2026, 12, 5, 11, 31, tzinfo=UTC)
    assert len(hour.starts()) == 60
    day = Span.ending_with(LAST_DAY, now)
    assert day.starts()[-1] == datetime(2026, 12, 5, 12, 30, tzinfo=UTC)
    assert day.end - day.start == timedelta(hours=24)
    # On a boundary, the bucket that starts there is the last one.
    on_edge = Span.ending_with(LAST_DAY, datetime(2026, 12, 5, 12, 45, tzinfo=UTC))
    assert on_edge.starts()[-1] == datetime(2026, 12, 5, 12, 45, tzinfo=UTC)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([5.0], 0.95, 5.0),
        ([1.0, 2.0], 0.5, 1.5),
        ([9.5, 10.0, 70.0], 0.5, 10.0),
        ([9.5, 10.0, 70.0], 0.95, 64.0),
        ([float(v) for v in range(1, 101)], 0.95, 95.05),
    ],
)
def test_percentiles_interpolate_as_postgresqls_percentile_cont(values, fraction, expected):
    assert percentile_cont(values, fraction) == pytest.approx(expected)


def test_a_count_has_no_tick_between_whole_numbers() -> None:
    figure = line_figure(
        key="backlog",
        title="Backlog",
        description="d",
        y_label="deliveries",
        buckets=FOUR,
        series=[("pending", [0.0, 1.0, 1.0, 0.0])],
        fmt=plain,
        whole=True,
    )
    assert [t.label for t in figure.y_ticks] == ["0", "1"]
    # A rate on the same scale has its middle tick.
    rate = line_figure(
        key="rate",
        title="Rate",
        description="d",
        y_label="succeeded",
        buckets=FOUR,
        series=[("rate", [0.0, 1.0, 1.0, 0.0])],
        fmt=plain,
        top=1.0,
    )
    assert [t.label for t in rate.y_ticks] == ["0", "0.5", "1"]
