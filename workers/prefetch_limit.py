"""How many messages a threads-pool worker process takes at once, following the provider's
latency.

Why: a payment holds its thread for its whole run, but it needs the interpreter only
between its waits.  At real provider latency (hundreds of milliseconds a call) nearly all
of a process's payments are waiting for the provider, and the process needs every one of
its threads to keep the provider busy (goal 1 of issue 14).  When the provider answers at
once, the same threads all want the interpreter: each of a payment's many I/O calls hands
the interpreter lock to another thread, and at 64 threads a payment cost markedly more CPU
in context switches than at 8 (the benchmark, ``payorch bench`` and docs/performance.md,
measures this).

So the broker's prefetch count (with late acknowledgement, the number of messages a
process holds, hence its tasks in flight) follows the calls in progress: once a second,
``floor`` messages for the runs that use the interpreter, plus ``headroom`` times the
provider calls that were in progress on average over that second, at most the pool's
concurrency.  Messages beyond the limit wait in the broker, where any process may take
them, not in a thread of this one.

What it never changes: the claim, the lease and the fencing (a message is a hint either
way); the threads (the pool keeps its concurrency; the limit only leaves some idle); the
prefetch of Celery's own ETA bookkeeping (the limit moves the count by its own changes
only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state

from orchestrator import metrics
from orchestrator.broker import PREFETCH_FLOOR_CONF
from orchestrator.logging import get_logger
from orchestrator.providers.calls_in_progress import PROVIDER_CALLS_IN_PROGRESS, CallsInProgress

__all__ = ["STEP", "AdaptivePrefetch", "PrefetchPolicy"]

log = get_logger(__name__)

# Runs a process lets compete for the interpreter besides those waiting for the provider
# (the default of Settings.worker_prefetch_floor).  Enough to overlap their database round
# trips; at zero provider latency 4 and 8 cost the same CPU per payment in the benchmark,
# and 16 cost more (more threads handing the interpreter lock to each other).
RUNS_BESIDE_PROVIDER_CALLS = 8
# Room above the calls in progress, so that the count grows within a few seconds when the
# provider slows down (each second multiplies a saturated limit by up to this much).
HEADROOM = 1.5
INTERVAL_SECONDS = 1.0


@dataclass
class PrefetchPolicy:
    """The limit from one second's reading; pure, so it is tested without a broker."""

    ceiling: int
    floor: int = RUNS_BESIDE_PROVIDER_CALLS
    headroom: float = HEADROOM

    def __post_init__(self) -> None:
        self.limit = self.ceiling  # start as a fixed prefetch would: no slow ramp at start

    def next_limit(self, *, calls_in_progress: float, messages_held: int) -> int:
        target = min(self.ceiling, self.floor + math.ceil(self.headroom * calls_in_progress))
        if target < self.limit:
            # An idle or lightly loaded process says nothing about the provider's latency
            # (no calls in progress either way): it keeps what the last busy second taught
            # it, so a burst after a quiet spell finds the limit it needs.
            if messages_held < self.limit / 2:
                return self.limit
            # Down by half the distance a second: one second's dip (the first tasks
            # connecting, a pause in the broker's deliveries) costs little throughput.
            target = (self.limit + target) // 2
        self.limit = target
        return target


class AdaptivePrefetch(bootsteps.StartStopStep):  # type: ignore[misc]  # celery is untyped
    """A consumer step: adjusts the prefetch count once a second, on the consumer's own
    thread (the event loop's timer), since a broker channel is not safe across threads."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.meter: CallsInProgress = PROVIDER_CALLS_IN_PROGRESS
        # Messages the process holds (received, not yet acknowledged): running or waiting.
        self.messages_held: Callable[[], int] = lambda: len(worker_state.reserved_requests)
        self.policy: PrefetchPolicy | None = None
        self.applied = 0
        self._entry: Any = None

    def start(self, parent: Any) -> None:
        if parent.hub is None or not parent.qos.value:
            # Without the event loop the only timer runs in a thread of its own; with a
            # prefetch count of 0 (unlimited) there is nothing to follow.
            log.info("prefetch_limit_off", reason="no event loop or no prefetch count")
            return
        if self.policy is None:
            floor = parent.app.conf.get(PREFETCH_FLOOR_CONF) or RUNS_BESIDE_PROVIDER_CALLS
            self.policy = PrefetchPolicy(ceiling=parent.initial_prefetch_count, floor=floor)
        # After a reconnect the Tasks step built a new QoS at the ceiling; the policy's
        # limit survives it and applies at once.
        self.applied = parent.qos.value
        self._apply(parent, self.policy.limit)
        metrics.WORKER_PREFETCH_LIMIT.set(self.policy.limit)
        self.meter.average_since_last_read()  # the first second starts now
        self._entry = parent.timer.call_repeatedly(INTERVAL_SECONDS, self.adjust, (parent,))

    def adjust(self, parent: Any) -> None:
        assert self.policy is not None
        limit = self.policy.next_limit(
            calls_in_progress=self.meter.average_since_last_read(),
            messages_held=self.messages_held(),
        )
        self._apply(parent, limit)

    def _apply(self, parent: Any, limit: int) -> None:
        change = limit - self.applied
        if change > 0:
            parent.qos.increment_eventually(change)
        elif change < 0:
            parent.qos.decrement_eventually(-change)
        if change:
            parent.qos.update()
            self.applied = limit
            metrics.WORKER_PREFETCH_LIMIT.set(limit)

    def stop(self, parent: Any) -> None:
        if self._entry is not None:
            self._entry.cancel()
            self._entry = None

    shutdown = stop


# The step by name, as Celery's blueprints accept it: ``orchestrator`` adds it to a
# threads-pool worker's app without importing ``workers`` (see ``orchestrator.broker``).
STEP = f"{__name__}:{AdaptivePrefetch.__name__}"
