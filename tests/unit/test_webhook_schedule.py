"""The webhook retry schedule: full jitter under a capped exponential ceiling, inside the
retry window."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from orchestrator.domain.backoff import backoff_ceiling
from orchestrator.events.schedule import RetryPolicy

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(base_seconds=5.0, cap_seconds=3600.0, window_hours=72.0)


def test_the_ceilings_double_from_the_base_up_to_the_cap() -> None:
    ceilings = [backoff_ceiling(n, base=5.0, cap=3600.0) for n in range(12)]
    assert ceilings[:5] == [5.0, 10.0, 20.0, 40.0, 80.0]
    assert ceilings[9] == 2560.0
    assert ceilings[10] == ceilings[11] == 3600.0


def test_every_delay_is_drawn_between_zero_and_the_ceiling_of_its_retry() -> None:
    rng = random.Random(7)
    for attempts in range(1, 40):
        ceiling = backoff_ceiling(attempts - 1, base=5.0, cap=3600.0)
        delays = [
            (
                POLICY.next_attempt_at(
                    attempts=attempts, window_started_at=START, now=START, rng=rng
                )
                - START
            ).total_seconds()
            for _ in range(50)
        ]
        assert all(0.0 <= d <= ceiling for d in delays)


def test_the_jitter_spreads_delays_over_the_whole_window_not_near_the_ceiling() -> None:
    rng = random.Random(11)
    delays = [
        (
            POLICY.next_attempt_at(attempts=8, window_started_at=START, now=START, rng=rng) - START
        ).total_seconds()
        for _ in range(2000)
    ]
    ceiling = backoff_ceiling(7, base=5.0, cap=3600.0)  # 640 s
    assert min(delays) < ceiling * 0.05
    assert max(delays) > ceiling * 0.95
    assert abs(sum(delays) / len(delays) - ceiling / 2) < ceiling * 0.05


def test_no_retry_is_scheduled_past_the_end_of_the_window() -> None:
    rng = random.Random(3)
    late = START + timedelta(hours=72) - timedelta(seconds=1)
    # A draw of more than one second lands after the window: given up (None).
    results = [
        POLICY.next_attempt_at(attempts=30, window_started_at=START, now=late, rng=rng)
        for _ in range(50)
    ]
    assert all(r is None or r < START + timedelta(hours=72) for r in results)
    assert any(r is None for r in results)
    after = START + timedelta(hours=72, seconds=1)
    assert POLICY.next_attempt_at(attempts=1, window_started_at=START, now=after, rng=rng) is None


def test_the_default_schedule_makes_dozens_of_attempts_within_72_hours() -> None:
    rng = random.Random(5)
    now, attempts = START, 0
    while True:
        attempts += 1
        when = POLICY.next_attempt_at(attempts=attempts, window_started_at=START, now=now, rng=rng)
        if when is None:
            break
        now = when
    # Full jitter halves the mean delay: about 3600/2 s per retry once capped.
    assert 60 < attempts < 250
