"""Retry delays: exponential backoff with full jitter and a cap.

``delay = uniform(0, min(cap, base * 2**retry))`` — "full jitter" (AWS architecture
blog, 2015): spreading retries over the whole window keeps a fleet of workers that failed
together from retrying together.  A provider's ``Retry-After`` is a floor, never ignored.
"""

from __future__ import annotations

import random


def backoff_ceiling(retry: int, *, base: float, cap: float) -> float:
    """The upper bound of the jitter window for the ``retry``-th retry (0-based)."""
    # min() before the power would overflow: 2**1100 is a float OverflowError.
    exponent = min(max(retry, 0), 62)
    return float(min(cap, base * (2**exponent)))


def backoff_delay(
    retry: int,
    *,
    base: float,
    cap: float,
    rng: random.Random,
    retry_after: float | None = None,
) -> float:
    delay = rng.uniform(0.0, backoff_ceiling(retry, base=base, cap=cap))
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
