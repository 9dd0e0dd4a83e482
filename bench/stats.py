"""Small statistics shared by the scenarios."""

from __future__ import annotations

import statistics
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (inclusive method); 0 for no values."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def completion_rate(times: list[float]) -> dict[str, Any]:
    """Completions per second between the 10th and the 90th percentile completion time: the
    steady state, without the start (processes warming up) and the tail (the last few
    stragglers).  ``times`` are completion instants in seconds, in any order."""
    ordered = sorted(times)
    n = len(ordered)
    if n < 10:
        return {"completed": n, "per_second": 0.0, "window_seconds": 0.0, "total_seconds": 0.0}
    first, last = n // 10, (9 * n) // 10 - 1
    window = ordered[last] - ordered[first]
    return {
        "completed": n,
        "per_second": round((last - first) / window, 1) if window > 0 else 0.0,
        "window_seconds": round(window, 3),
        "total_seconds": round(ordered[-1] - ordered[0], 3),
    }


def steady_window(times: list[float]) -> tuple[float, float, int] | None:
    """The window ``completion_rate`` measures: from the 10th to the 90th percentile
    completion, and how many completions it spans (None for fewer than 10)."""
    ordered = sorted(times)
    n = len(ordered)
    if n < 10:
        return None
    first, last = n // 10, (9 * n) // 10 - 1
    return ordered[first], ordered[last], last - first


def ratio(ours: float, baseline: float) -> float | None:
    return round(ours / baseline, 3) if baseline else None
