"""The retry schedule: exponential ceilings with a cap, full jitter under each ceiling, and
a provider's Retry-After as a floor.  Pure functions, a seeded RNG: no clock, no sleep."""

from __future__ import annotations

import random

import pytest

from orchestrator.domain.backoff import backoff_ceiling, backoff_delay

BASE = 0.5
CAP = 60.0


def test_ceilings_double_from_the_base_until_the_cap():
    ceilings = [backoff_ceiling(retry, base=BASE, cap=CAP) for retry in range(10)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


@pytest.mark.parametrize("retry", [64, 1_000, 10**9])
def test_a_huge_retry_number_stays_at_the_cap_without_overflowing(retry):
    assert backoff_ceiling(retry, base=BASE, cap=CAP) == CAP
    assert 0.0 <= backoff_delay(retry, base=BASE, cap=CAP, rng=random.Random(1)) <= CAP


def test_a_negative_retry_number_counts_as_the_first():
    assert backoff_ceiling(-3, base=BASE, cap=CAP) == BASE


@pytest.mark.parametrize("retry", range(9))
def test_every_delay_lies_between_zero_and_its_ceiling(retry):
    rng = random.Random(retry)
    ceiling = backoff_ceiling(retry, base=BASE, cap=CAP)
    delays = [backoff_delay(retry, base=BASE, cap=CAP, rng=rng) for _ in range(2_000)]
    assert all(0.0 <= d <= ceiling for d in delays)


def test_full_jitter_spreads_delays_over_the_whole_window():
    # Full jitter, not "ceiling plus a little noise": a fleet that failed together must not
    # retry together, so delays cover [0, ceiling] evenly.
    rng = random.Random(42)
    ceiling = backoff_ceiling(6, base=BASE, cap=CAP)
    delays = sorted(backoff_delay(6, base=BASE, cap=CAP, rng=rng) for _ in range(10_000))
    assert delays[0] < 0.01 * ceiling
    assert delays[-1] > 0.99 * ceiling
    median = delays[len(delays) // 2]
    assert 0.45 * ceiling < median < 0.55 * ceiling


def test_the_same_seed_gives_the_same_schedule():
    def schedule(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [backoff_delay(r, base=BASE, cap=CAP, rng=rng) for r in range(8)]

    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)


def test_retry_after_is_a_floor_never_ignored():
    rng = random.Random(3)
    assert all(
        backoff_delay(0, base=BASE, cap=CAP, rng=rng, retry_after=5.0) >= 5.0 for _ in range(500)
    )
    # ... and never shortened by the cap either: the provider said when.
    assert backoff_delay(20, base=BASE, cap=CAP, rng=rng, retry_after=120.0) == 120.0
