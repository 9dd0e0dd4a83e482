"""Scenario 9's arithmetic, apart from the processes: the variants, the probes a circuit
allows over an outage, and the verdict on one variant's figures (issue 41's acceptance).

Pure functions of the figures ``bench.outage`` measured, so they are unit-tested without
running a stack (tests/unit/test_bench_outage.py).
"""

from __future__ import annotations

import math
from typing import Any

# The simulator's fault per variant: every call answered 500 before the simulator acts, or
# never answered (each call ends at the adapter's read timeout, an unknown outcome).
VARIANTS: dict[str, str] = {"5xx": "any:error_500_before", "timeout": "any:hang"}

# The drain after recovery against the pool's own speed (the same bar as the deep backlog's
# drain against a shallow one, scenario 8).
DRAIN_TARGET = 0.9
# Issue 41's bound for a backlog of any age.  A payment accepted while the circuit is open
# gets one wake-up, when the sweeper releases it (the dispatcher holds the accept's,
# decision 0109); those in flight when it opened, and the probes, need a second.
MESSAGES_TARGET = 1.2


def parse_variants(values: list[str] | None) -> tuple[str, ...]:
    """``--outage-variant`` (repeatable; none: both).  ValueError for an unknown one."""
    if not values:
        return tuple(VARIANTS)
    unknown = [value for value in values if value not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown outage variants {unknown}; known: {', '.join(VARIANTS)}")
    return tuple(dict.fromkeys(values))


def probes_allowed(
    *, open_seconds: float, probes: int, circuit_open_for_seconds: float, arrivals_per_second: float
) -> int:
    """The provider calls an open circuit may let through from the moment it first opened to
    the recovery: ``probes`` per half-open period (a period every ``open_seconds``, one more
    for the period under way), plus the calls a worker's view of the circuit, re-read about
    once a second, let through before it saw the circuit open (two seconds of arrivals, a
    margin for a loaded machine)."""
    if circuit_open_for_seconds <= 0:
        return 0
    periods = math.ceil(circuit_open_for_seconds / open_seconds) + 1
    stale_views = math.ceil(2 * arrivals_per_second)
    return probes * periods + stale_views


def verdict(figures: dict[str, Any]) -> dict[str, bool]:
    """Each acceptance criterion for one variant's figures: met or not.  A figure the run
    could not measure (the circuit never opened, no drain rate) is a miss, never a pass."""
    accepted = figures["accepted"]
    calls = figures["provider_calls"]
    drain = figures["drain"]
    opened = calls.get("after_open") is not None
    return {
        "parked": figures["parked"]["max_seen"] == 0 and figures["parked"]["at_end"] == 0,
        "succeeded": accepted > 0 and figures["succeeded"] == accepted,
        "charged_twice": figures["charged_twice"] == 0 and figures["not_charged"] == 0,
        "calls_within_probes": opened and calls["after_open"] <= calls["probes_allowed"],
        "drain": drain.get("ratio") is not None and drain["ratio"] >= DRAIN_TARGET,
        "messages": figures["messages_per_payment"] <= MESSAGES_TARGET,
    }


def met(figures: dict[str, Any]) -> bool:
    return all(verdict(figures).values())
