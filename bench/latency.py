"""Scenario 6, realistic provider latency: payments completed per second when every provider
call takes ``latency`` seconds (the simulator's ``any:latency`` fault), beside a task that
only sleeps for as long as a payment's two calls, on the same worker command.

For each worker configuration (none given: the default ``payorch worker``, no flags):

1. a backlog of payments is accepted through the API with no worker running;
2. the worker starts and drains it; its process group's resident memory and CPU time are
   sampled from /proc, and so is the number of payments it holds a lease on (in flight);
3. the same worker command drains as many ``bench.sleep`` tasks (``2 x latency`` seconds
   each) from the same queue: the rate the pool allows when the work is pure waiting.
   The sleep counts as a provider call in progress (``bench.noop``), so the worker's
   prefetch limit treats it as it treats a payment's calls.

Rates are taken between the 10th and 90th percentile completion (``bench.stats``).  The
worker also counts its transactions and database round trips (``bench.dbcount``).
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import dbcount
from bench.accept import payment_request
from bench.load import fixed_count
from bench.noop import SLEEP_TASK, Counter
from bench.procstat import Sampler, wait_until
from bench.profile import record
from bench.stack import Stack
from bench.stats import completion_rate, ratio, steady_window
from workers.celery_app import create_celery_app

ACCEPT_CONCURRENCY = 50
MIB = 1024 * 1024
# The payments worker's context switches are read every fourth sample (once a second).
SWITCHES_EVERY = 4


def _drain_timeout(count: int) -> float:
    return 120.0 + count / 2  # ends as soon as the work is done


def describe(args: tuple[str, ...]) -> str:
    return "payorch worker " + " ".join(args) if args else "payorch worker (defaults)"


def measure_latency(
    stack: Stack,
    *,
    latency_seconds: float,
    payments_count: int,
    worker_args: tuple[str, ...],
    tag: str,
) -> dict[str, Any]:
    run = secrets.token_hex(4)
    key = stack.merchant_key
    accepted = asyncio.run(
        fixed_count(
            stack.api_url,
            lambda _conn, n: payment_request(key, f"latency-{run}-{n}"),
            concurrency=ACCEPT_CONCURRENCY,
            total=payments_count,
        )
    )
    # As deployed: a task that ran out of its time budget (a busy machine) defers its
    # payment to the row, and only the sweeper dispatches it again.
    stack.start_sweeper()
    already = stack.count_finished()
    with tempfile.TemporaryDirectory(prefix="payorch-dbcount-") as counts:
        worker = stack.start_worker_with(
            worker_args, name=f"worker-{tag}-payments", env={dbcount.DIRECTORY_ENV: counts}
        )
        sampler = Sampler(
            worker.pid, in_flight=stack.count_in_flight, switches_every=SWITCHES_EVERY
        ).start()
        profile = record(worker.pid, f"worker-{tag}-latency-{latency_seconds * 1000:.0f}ms")
        started = time.monotonic()
        wait_until(
            lambda: stack.count_finished() >= already + payments_count,
            _drain_timeout(payments_count),
            "the payments to finish",
        )
        drain_seconds = time.monotonic() - started
        profile.stop()
        sampler.stop()
        time.sleep(0.6)  # the counters' last write (twice a second)
        worker.stop()
        database = dbcount.read(Path(counts))
    completions = sorted(stack.completion_times())[-payments_count:]
    payments_rate = completion_rate(completions)
    steady_cpu_ms = _steady_cpu_ms_per_payment(sampler, completions)
    steady_switches = _steady_switches_per_payment(sampler, completions)

    counter = Counter()
    try:
        stack.count_noops_to(counter.address)
        app = create_celery_app(stack.settings)
        for _ in range(payments_count):
            app.send_task(SLEEP_TASK, args=[2 * latency_seconds], retry=False)
        sleeper = stack.start_worker_with(worker_args, name=f"worker-{tag}-sleep")
        sleep_sampler = Sampler(sleeper.pid).start()
        sleep_profile = record(sleeper.pid, f"worker-{tag}-sleep-{latency_seconds * 1000:.0f}ms")
        if not counter.wait_for(payments_count, _drain_timeout(payments_count)):
            raise RuntimeError(f"only {len(counter.times)} of {payments_count} sleeps reported")
        sleep_profile.stop()
        sleep_sampler.stop()
        sleeper.stop()
        sleep_rate = completion_rate(counter.times)
    finally:
        counter.close()

    in_flight = sampler.peak_in_flight
    rss_mib = sampler.peak_rss_bytes / MIB
    return {
        "worker": describe(worker_args),
        "worker_args": list(worker_args),
        "latency_seconds": latency_seconds,
        "accepted": accepted.summary(),
        "payments": payments_rate,
        "sleep": {**sleep_rate, "seconds": 2 * latency_seconds},
        "ratio": ratio(payments_rate["per_second"], sleep_rate["per_second"]),
        "peak_in_flight": in_flight,
        "peak_rss_mib": round(rss_mib, 1),
        "rss_mib_per_100_in_flight": round(rss_mib * 100 / in_flight, 1) if in_flight else None,
        "peak_pss_mib": round(sampler.peak_pss_bytes / MIB, 1),
        "sleep_peak_rss_mib": round(sleep_sampler.peak_rss_bytes / MIB, 1),
        # What the pool itself costs per task (Celery, kombu, logging): the floor under
        # the payment's own CPU.
        "sleep_worker_cpu_ms_per_task": round(sleep_sampler.cpu_seconds * 1000 / payments_count, 2),
        "worker_cpu_ms_per_payment": round(sampler.cpu_seconds * 1000 / payments_count, 2),
        # The same over the rate's steady window only (10th to 90th percentile completion):
        # what a payment costs a running worker, without its threads' first tasks
        # (connections, compiled statements, per-thread clients) and the drained tail.
        "worker_cpu_ms_per_payment_steady": steady_cpu_ms,
        # The worker's threads' context switches per payment over the same window: the
        # interpreter lock handed among them (docs/performance.md).
        "worker_context_switches_per_payment_steady": steady_switches,
        "worker_system_cpu_ms_per_payment": round(
            sampler.system_seconds * 1000 / payments_count, 2
        ),
        "drain_seconds": round(drain_seconds, 2),
        "database": database,
        "database_per_payment": dbcount.per_payment(database, payments_count),
    }


def _steady_cpu_ms_per_payment(sampler: Sampler, completions: list[float]) -> float | None:
    window = steady_window(completions)
    if window is None:
        return None
    start, end, count = window
    cpu = sampler.cpu_seconds_between(start, end)
    return None if cpu is None or count == 0 else round(cpu * 1000 / count, 2)


def _steady_switches_per_payment(sampler: Sampler, completions: list[float]) -> float | None:
    window = steady_window(completions)
    if window is None:
        return None
    start, end, count = window
    switches = sampler.context_switches_between(start, end)
    return None if switches is None or count == 0 else round(switches / count, 1)


def parse_worker_args(values: list[str] | None) -> tuple[tuple[str, ...], ...]:
    """``--latency-worker "--pool prefork --concurrency 8"`` (repeatable); none: the default
    worker only.  An empty string is the default worker too."""
    if not values:
        return ((),)
    return tuple(tuple(shlex.split(value)) for value in values)
