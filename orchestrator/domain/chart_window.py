"""The console's chart windows (decision 0103): the last hour by the minute, the last day by
the quarter hour, and the span of buckets a window covers at a given instant.

Buckets are aligned to the clock (12:07:00-12:08:00, not 12:07:31-12:08:31), so two
refreshes a few seconds apart draw the same bars, and the last bucket is the one that holds
``now`` (still filling).  Pure: the queries (``db.repositories.charts``) take a ``Span`` and
answer per bucket index, 0 the oldest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ChartWindow:
    name: str  # the console's ``?window=`` value
    label: str
    bucket: timedelta  # a whole number of seconds
    buckets: int

    @property
    def duration(self) -> timedelta:
        return self.bucket * self.buckets


LAST_HOUR = ChartWindow("1h", "Last hour", timedelta(minutes=1), 60)
LAST_DAY = ChartWindow("24h", "Last 24 hours", timedelta(minutes=15), 96)
WINDOWS: dict[str, ChartWindow] = {w.name: w for w in (LAST_HOUR, LAST_DAY)}


@dataclass(frozen=True)
class Span:
    """``count`` buckets of ``width`` from ``start``: bucket ``i`` is
    ``[start + i * width, start + (i + 1) * width)``."""

    start: datetime
    width: timedelta
    count: int

    @classmethod
    def ending_with(cls, window: ChartWindow, now: datetime) -> Span:
        """The window's buckets, the last one holding ``now``."""
        width = int(window.bucket.total_seconds())
        seconds = int((now - EPOCH).total_seconds() // width) * width
        current = EPOCH + timedelta(seconds=seconds)
        return cls(current - window.bucket * (window.buckets - 1), window.bucket, window.buckets)

    @property
    def end(self) -> datetime:
        return self.start + self.width * self.count

    @property
    def width_seconds(self) -> int:
        return int(self.width.total_seconds())

    @property
    def start_epoch(self) -> int:
        return int((self.start - EPOCH).total_seconds())

    def starts(self) -> list[datetime]:
        return [self.start + self.width * i for i in range(self.count)]


@dataclass(frozen=True)
class Quantiles:
    """Seconds from a payment's accept to its final status, in one bucket."""

    p50: float
    p95: float


def percentile_cont(ordered: list[float], fraction: float) -> float:
    """PostgreSQL's ``percentile_cont``: linear interpolation between the two values around
    position ``fraction * (n - 1)`` of the sorted values (the SQLite path computes it here,
    from the window's rows; PostgreSQL in the query)."""
    if not ordered:
        raise ValueError("no values")
    position = fraction * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)
