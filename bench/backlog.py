"""Scenario 8, deep backlog: broker messages per payment and drain rate when a backlog waits
many dispatch leases in the queue before any worker runs, beside a shallow one (issue 41).

For each depth (``shallow``: the worker starts as soon as the backlog is accepted; ``deep``:
after ``deep_leases`` dispatch leases):

1. a backlog of payments is accepted through the API with no worker running; the sweeper
   runs (it hosts the dispatcher, which publishes one wake-up per payment);
2. after the depth's wait, the default ``payorch worker`` starts and drains it against a
   provider answering after ``latency`` seconds;
3. messages published = one wake-up per payment + the sweeper's re-dispatches (its
   ``takeover`` lease events); the drain rate is taken between the 10th and 90th
   percentile completion (``bench.stats``).

The dispatch lease is short (``DISPATCH_LEASE_SECONDS``) so that a backlog many leases deep
takes seconds to build; nothing in the sweeper's rule depends on the lease's length
(orchestrator/engine/queue_horizon.py).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.accept import payment_request
from bench.load import fixed_count
from bench.procstat import wait_until
from bench.stack import Stack, production_stack
from bench.stats import completion_rate, ratio
from orchestrator.db.tables import lease_events

ACCEPT_CONCURRENCY = 50
DISPATCH_LEASE_SECONDS = 5.0
BACKLOG_SETTINGS: dict[str, Any] = {
    "dispatch_lease_seconds": DISPATCH_LEASE_SECONDS,
    "sweep_interval_seconds": 1.0,
}


def measure_backlog(
    log_dir: Path, *, payments_count: int, latency_seconds: float, deep_leases: int
) -> dict[str, Any]:
    depths = {"shallow": 0.0, "deep": deep_leases * DISPATCH_LEASE_SECONDS}
    figures: dict[str, Any] = {}
    for name, wait_seconds in depths.items():
        fault = f"any:latency:seconds={latency_seconds}"
        with production_stack(
            log_dir / name, simulator_faults=(fault,), **BACKLOG_SETTINGS
        ) as stack:
            stack.start_api()
            figures[name] = _one_depth(stack, name, payments_count, wait_seconds)
        print(
            f"  {name}: {figures[name]['messages_per_payment']} messages/payment, "
            f"{figures[name]['payments']['per_second']} payments/s",
            flush=True,
        )
    return {
        **BACKLOG_SETTINGS,
        "latency_seconds": latency_seconds,
        "payments": payments_count,
        "deep_leases": deep_leases,
        **figures,
        "deep_to_shallow_drain": ratio(
            figures["deep"]["payments"]["per_second"], figures["shallow"]["payments"]["per_second"]
        ),
    }


def _one_depth(stack: Stack, name: str, payments_count: int, wait_seconds: float) -> dict[str, Any]:
    run = secrets.token_hex(4)
    key = stack.merchant_key
    stack.start_sweeper()
    accepted = asyncio.run(
        fixed_count(
            stack.api_url,
            lambda _conn, n: payment_request(key, f"backlog-{run}-{n}"),
            concurrency=ACCEPT_CONCURRENCY,
            total=payments_count,
        )
    )
    # The backlog ages in the queue while the sweeper passes every second.
    time.sleep(wait_seconds)
    before_worker = _takeovers(stack)
    already = stack.count_finished()
    worker = stack.start_worker_with((), name=f"worker-{name}")
    started = time.monotonic()
    wait_until(
        lambda: stack.count_finished() >= already + payments_count,
        120.0 + payments_count / 2,
        "the backlog to drain",
    )
    drain_seconds = time.monotonic() - started
    worker.stop()
    completions = sorted(stack.completion_times())[-payments_count:]
    redispatched = _takeovers(stack)
    return {
        "wait_seconds": wait_seconds,
        "accepted": accepted.summary(),
        "redispatched_while_waiting": before_worker,
        "redispatched": redispatched,
        "messages_per_payment": round((payments_count + redispatched) / payments_count, 3),
        "payments": completion_rate(completions),
        "drain_seconds": round(drain_seconds, 2),
    }


def _takeovers(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(lease_events.c.event == "takeover")
            ).scalar_one()
        )
