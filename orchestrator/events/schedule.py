"""When a failed delivery is tried again, and when it is given up.

Exponential backoff with full jitter (``orchestrator.domain.backoff``):
the n-th retry waits ``uniform(0, min(WEBHOOK_RETRY_CAP_SECONDS, BASE * 2**(n-1)))``, so a
fleet of deliveries that failed together (an endpoint that was down) does not come back
together.  Retries stop when the next one would fall after ``window_started_at +
WEBHOOK_RETRY_HOURS`` (a redeliver starts a new window).  With the defaults (5 s, 3600 s,
72 h) the ceilings are 5, 10, 20, … 2560 s, then 3600 s; full jitter waits half the
ceiling on average, so a delivery failing all along makes about 150 attempts in 72 h.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.domain.backoff import backoff_delay


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float
    cap_seconds: float
    window_hours: float

    def next_attempt_at(
        self, *, attempts: int, window_started_at: datetime, now: datetime, rng: random.Random
    ) -> datetime | None:
        """After ``attempts`` failed attempts: when to try again, or None to give up."""
        delay = backoff_delay(attempts - 1, base=self.base_seconds, cap=self.cap_seconds, rng=rng)
        when = now + timedelta(seconds=delay)
        if when >= self.window_end(window_started_at):
            return None
        return when

    def window_end(self, window_started_at: datetime) -> datetime:
        return window_started_at + timedelta(hours=self.window_hours)
