"""Charts drawn on the server (decision 0103): values per time bucket in, the geometry of an
SVG figure out.  ``templates/_chart.html`` writes the SVG from a ``Figure`` through Jinja2's
autoescaping, so no text here is ever markup; this module only places things.

A figure is a plot box inside a fixed viewBox (the browser scales it to the page):

    (0, 0) ───────────────────────────────── (WIDTH, 0)
      │  y ticks │ plot: x = bucket, y = value │
      │          └─────────────────────────────┘ PLOT_BOTTOM
      │              x ticks (bucket boundaries, UTC)
    (0, HEIGHT)

Bucket ``i`` of ``n`` spans ``[i, i + 1) * PLOT_WIDTH / n`` from ``PLOT_LEFT``: a bar fills
it (less a gap), a line's point sits at its middle.  A value ``v`` of a scale topped at
``top`` sits at ``PLOT_BOTTOM - v / top * PLOT_HEIGHT``.  A missing value (None: nothing to
measure in that bucket) breaks a line into segments rather than drawing a false zero.

Every figure also carries its numbers as table rows (the buckets that have any), the text
a screen reader reads and what a person copies; with none the figure says "no data".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH = 640
HEIGHT = 200
PLOT_LEFT = 60.0
PLOT_RIGHT = WIDTH - 20.0
PLOT_TOP = 12.0
PLOT_BOTTOM = HEIGHT - 30.0
PLOT_WIDTH = PLOT_RIGHT - PLOT_LEFT
PLOT_HEIGHT = PLOT_BOTTOM - PLOT_TOP
# The share of a bucket's width left empty between two bars.
BAR_GAP = 0.2
# How many x-axis intervals are labelled (their boundaries get a tick and a time).
X_TICK_INTERVALS = 4

Format = Callable[[float], str]


@dataclass(frozen=True)
class Tick:
    at: float  # x for the x axis, y for the y axis
    label: str


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str  # "12:07 · succeeded: 4" (the point's tooltip)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: str
    title: str


@dataclass(frozen=True)
class Line:
    series: str
    segments: tuple[str, ...]  # polyline ``points`` attributes, one per unbroken run
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Row:
    bucket: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Figure:
    key: str  # the element ids' stem: chart-{key}
    title: str
    description: str
    y_label: str
    series: tuple[str, ...]  # legend and table columns, in drawing order
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    bars: tuple[Bar, ...]
    lines: tuple[Line, ...]
    rows: tuple[Row, ...]
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: float = PLOT_LEFT
    plot_right: float = PLOT_RIGHT
    plot_top: float = PLOT_TOP
    plot_bottom: float = PLOT_BOTTOM

    @property
    def empty(self) -> bool:
        return not self.rows

    @property
    def middle(self) -> tuple[float, float]:
        return (
            (self.plot_left + self.plot_right) / 2,
            (self.plot_top + self.plot_bottom) / 2,
        )


@dataclass(frozen=True)
class Buckets:
    """The x axis: ``count`` buckets of ``width`` from ``start`` (UTC)."""

    start: datetime
    width: timedelta
    count: int

    def label(self, i: int) -> str:
        return _clock(self.start + self.width * i)

    def row_label(self, i: int) -> str:
        begins = self.start + self.width * i
        return begins.strftime("%Y-%m-%d ") + _clock(begins)


def nice_top(largest: float) -> float:
    """The scale's top: the smallest 1, 2 or 5 times a power of ten at or above
    ``largest``; 1 when there is nothing above zero (an empty chart still has an axis)."""
    if largest <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(largest))
    for step in (1, 2, 5, 10):
        if step * power >= largest:
            return float(step * power)
    raise AssertionError("unreachable: 10 * power > largest")


def x_left(i: int, count: int) -> float:
    return PLOT_LEFT + i * PLOT_WIDTH / count


def x_middle(i: int, count: int) -> float:
    return PLOT_LEFT + (i + 0.5) * PLOT_WIDTH / count


def y_of(value: float, top: float) -> float:
    return PLOT_BOTTOM - value / top * PLOT_HEIGHT


def bar_figure(
    *,
    key: str,
    title: str,
    description: str,
    y_label: str,
    buckets: Buckets,
    series: Sequence[tuple[str, Sequence[int]]],
) -> Figure:
    """Bars stacked per bucket, in the order of ``series``; a zero draws nothing."""
    totals = [sum(values[i] for _, values in series) for i in range(buckets.count)]
    top = nice_top(max(totals, default=0))
    slot = PLOT_WIDTH / buckets.count
    bars: list[Bar] = []
    for i in range(buckets.count):
        stacked = 0
        for name, values in series:
            value = values[i]
            if value <= 0:
                continue
            upper, lower = y_of(stacked + value, top), y_of(stacked, top)
            bars.append(
                Bar(
                    x=_r(x_left(i, buckets.count) + slot * BAR_GAP / 2),
                    y=_r(upper),
                    width=_r(slot * (1 - BAR_GAP)),
                    height=_r(lower - upper),
                    series=name,
                    title=f"{buckets.label(i)} · {name}: {value}",
                )
            )
            stacked += value
    rows = tuple(
        Row(buckets.row_label(i), tuple(str(values[i]) for _, values in series))
        for i in range(buckets.count)
        if totals[i]
    )
    return Figure(
        key=key,
        title=title,
        description=description,
        y_label=y_label,
        series=tuple(name for name, _ in series),
        x_ticks=_x_ticks(buckets),
        y_ticks=_y_ticks(top, _count, whole=True),
        bars=tuple(bars),
        lines=(),
        rows=rows,
    )


def line_figure(
    *,
    key: str,
    title: str,
    description: str,
    y_label: str,
    buckets: Buckets,
    series: Sequence[tuple[str, Sequence[float | None]]],
    fmt: Format,
    top: float | None = None,
    whole: bool = False,
) -> Figure:
    """One line per series, a point per bucket with a value, broken where one is None.
    ``top``: a fixed scale (a rate's 1.0); otherwise the nice top of the largest value.
    ``whole``: the values are counts, so no tick between whole numbers."""
    present = [v for _, values in series for v in values if v is not None]
    scale = top if top is not None else nice_top(max(present, default=0.0))
    lines: list[Line] = []
    for name, values in series:
        points: list[Point] = []
        segments: list[str] = []
        run: list[str] = []
        for i, value in enumerate(values):
            if value is None:
                if run:
                    segments.append(" ".join(run))
                run = []
                continue
            point = Point(
                x=_r(x_middle(i, buckets.count)),
                y=_r(y_of(value, scale)),
                title=f"{buckets.label(i)} · {name}: {fmt(value)}",
            )
            points.append(point)
            run.append(f"{point.x},{point.y}")
        if run:
            segments.append(" ".join(run))
        lines.append(Line(name, tuple(segments), tuple(points)))
    rows = tuple(
        Row(
            buckets.row_label(i),
            tuple(_cell(values[i], fmt) for _, values in series),
        )
        for i in range(buckets.count)
        if any(values[i] is not None for _, values in series)
    )
    return Figure(
        key=key,
        title=title,
        description=description,
        y_label=y_label,
        series=tuple(name for name, _ in series),
        x_ticks=_x_ticks(buckets),
        y_ticks=_y_ticks(scale, fmt, whole=whole),
        bars=(),
        lines=tuple(lines),
        rows=rows,
    )


def _x_ticks(buckets: Buckets) -> tuple[Tick, ...]:
    step = max(1, buckets.count // X_TICK_INTERVALS)
    return tuple(
        Tick(_r(x_left(i, buckets.count)), buckets.label(i))
        for i in range(0, buckets.count + 1, step)
    )


def _y_ticks(top: float, fmt: Format, *, whole: bool) -> tuple[Tick, ...]:
    """0, the middle and the top; a count's middle only when it is a whole number."""
    values = (0.0, top / 2, top) if not whole or (top / 2).is_integer() else (0.0, top)
    return tuple(Tick(_r(y_of(v, top)), fmt(v)) for v in values)


def _cell(value: float | None, fmt: Format) -> str:
    return "-" if value is None else fmt(value)


def _count(value: float) -> str:
    return f"{value:g}"


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def _r(value: float) -> float:
    """Coordinates to a tenth of a unit: finer is invisible and only lengthens the page."""
    return round(value, 1)
