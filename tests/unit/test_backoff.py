from __future__ import annotations

import random

import pytest

from orchestrator.domain.backoff import backoff_ceiling, backoff_delay


def test_the_ceiling_doubles_per_retry_up_to_the_cap():
    ceilings = [backoff_ceiling(n, base=0.5, cap=10) for n in range(8)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 10, 10, 10]


def test_huge_retry_numbers_do_not_overflow():
    assert backoff_ceiling(10_000, base=0.5, cap=60) == 60


@pytest.mark.parametrize("retry", range(10))
def test_full_jitter_stays_inside_the_window_and_uses_all_of_it(retry):
    rng = random.Random(retry)
    ceiling = backoff_ceiling(retry, base=0.5, cap=30)
    delays = [backoff_delay(retry, base=0.5, cap=30, rng=rng) for _ in range(2000)]
    assert all(0 <= d <= ceiling for d in delays)
    # Full jitter, not "equal jitter": the lower half of the window is used too.
    assert min(delays) < ceiling * 0.1 and max(delays) > ceiling * 0.9


def test_retry_after_is_a_floor():
    rng = random.Random(1)
    delays = [backoff_delay(0, base=0.5, cap=30, rng=rng, retry_after=2.0) for _ in range(200)]
    assert min(delays) >= 2.0
