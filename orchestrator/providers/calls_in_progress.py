"""How many slow provider calls this process has in progress, averaged over time.

The worker's prefetch limit (``workers.prefetch_limit``) reads it once a second: a task
waiting for the provider holds a thread but not the interpreter, so the worker may take
one more message for each call in progress, and only a few beyond them.  Every call of
``ObservedProvider`` is counted, whichever provider stands behind it.

A call counts only for the time it runs beyond ``GRACE_SECONDS``.  A call that answers
within that is as short as a database round trip: the runs the limit always allows cover
it.  Hazard without the grace: a call's wall time includes the wait to take the
interpreter back, which grows with the tasks in flight, so counting all of it would let
the limit feed on its own contention instead of on the provider's latency.

The average is a time integral divided by the time, and a call still running when it is
read counts for the time it has run so far: a provider that stalls shows up within a
second, not when its calls end.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable

__all__ = ["GRACE_SECONDS", "PROVIDER_CALLS_IN_PROGRESS", "CallsInProgress"]

# Stripe answers in 200-600 ms; a database round trip here takes well under a millisecond,
# and a call's wait for the interpreter a few milliseconds under load.
GRACE_SECONDS = 0.02


class CallsInProgress:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, grace: float = GRACE_SECONDS
    ) -> None:
        self._clock = clock
        self._grace = grace
        self._tokens = itertools.count()
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, float] = {}  # token -> when its grace ends
        self._integral = 0.0  # call-seconds beyond the grace since the last read
        self._read_at = self._clock()

    def _counted(self, grace_ends: float, now: float) -> float:
        # Caller holds the lock.  The part of [grace_ends, now] not counted by a read yet.
        return max(0.0, now - max(grace_ends, self._read_at))

    def started(self) -> int:
        """Count a call from now; give the token back to ``ended``."""
        token = next(self._tokens)
        grace_ends = self._clock() + self._grace
        with self._lock:
            self._open[token] = grace_ends
        return token

    def ended(self, token: int) -> None:
        now = self._clock()
        with self._lock:
            grace_ends = self._open.pop(token, None)
            if grace_ends is not None:
                self._integral += self._counted(grace_ends, now)

    def average_since_last_read(self) -> float:
        """Slow calls in progress on average since the previous read (or since creation)."""
        now = self._clock()
        with self._lock:
            integral = self._integral + sum(
                self._counted(grace_ends, now) for grace_ends in self._open.values()
            )
            elapsed = now - self._read_at
            self._integral = 0.0
            self._read_at = now
        return integral / elapsed if elapsed > 0 else 0.0

    def after_fork_in_child(self) -> None:
        """A forked child has no calls in progress, and a lock another thread of the parent
        held at the fork would stay held forever: start afresh."""
        self._reset()


# The process's one meter: the provider wrapper counts into it, the worker's consumer reads it.
PROVIDER_CALLS_IN_PROGRESS = CallsInProgress()
os.register_at_fork(after_in_child=PROVIDER_CALLS_IN_PROGRESS.after_fork_in_child)
