"""Scenario 2, end to end: payments completed per second with a zero-latency provider,
beside the same Celery setup running a no-op task.

Production stack (PostgreSQL + RabbitMQ): a backlog is accepted through the API with no
worker running, then one ``payorch worker`` drains it; then the same worker command drains a
backlog of no-op messages published to the same queue.  Both rates are taken between the
10th and the 90th percentile completion (``bench.stats.completion_rate``), so the worker's
start-up and the last stragglers do not count.

Embedded default (``bench.embedded``, a separate process): the demo's stack (SQLite,
Celery's in-memory transport, a thread-pool worker, the simulator, the API, all in one
process).  Its worker runs while the payments arrive, so there the rate includes the API's
share of the one interpreter; the no-ops are published inside that process.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.accept import payment_request
from bench.load import fixed_count
from bench.noop import ADDRESS_ENV, NOOP_TASK, Counter
from bench.stack import FINISHED, Stack, bench_environment, python_module
from bench.stats import completion_rate, ratio
from orchestrator.db.tables import payments
from tests.support.processes import ProcessManager
from workers.celery_app import create_celery_app

ACCEPT_CONCURRENCY = 50
# The embedded stack may be far slower than the production one (see bench/RESULTS.md): its
# rates are taken from what completed within this time, so the bench always ends.
EMBEDDED_WAIT_SECONDS = 60.0


def _wait(what: str, condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def _within(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _drain_timeout(count: int) -> float:
    return 120.0 + count / 5  # generous: ends as soon as the work is done


def measure_production(
    stack: Stack, *, payments_count: int, noops: int, worker_concurrency: int
) -> dict[str, Any]:
    run = secrets.token_hex(4)
    key = stack.merchant_key
    accepted = asyncio.run(
        fixed_count(
            stack.api_url,
            lambda _conn, n: payment_request(key, f"e2e-{run}-{n}"),
            concurrency=ACCEPT_CONCURRENCY,
            total=payments_count,
        )
    )
    # As deployed: the accepts only NOTIFY; the sweeper's dispatcher turns the wake-ups into
    # tasks (without one, nothing would publish them: the run timed out).
    stack.start_sweeper()
    worker = stack.start_worker(worker_concurrency, name="worker-payments")
    _wait(
        "the payments to finish",
        lambda: stack.count_finished() >= payments_count,
        _drain_timeout(payments_count),
    )
    worker.stop()
    payments_rate = completion_rate(stack.completion_times())

    counter = Counter()
    try:
        stack.count_noops_to(counter.address)
        app = create_celery_app(stack.settings)
        started = time.perf_counter()
        for n in range(noops):
            app.send_task(NOOP_TASK, args=[f"pay_{n:032x}", 1], retry=False)
        publish_seconds = time.perf_counter() - started
        worker = stack.start_worker(worker_concurrency, name="worker-noop")
        if not counter.wait_for(noops, _drain_timeout(noops)):
            raise RuntimeError(f"only {len(counter.times)} of {noops} no-ops reported back")
        worker.stop()
        noop_rate = completion_rate(counter.times)
    finally:
        counter.close()
    return {
        "worker_concurrency": worker_concurrency,
        "accepted": accepted.summary(),
        "payments": payments_rate,
        "noop": {**noop_rate, "publish_seconds": round(publish_seconds, 3)},
        "ratio": ratio(payments_rate["per_second"], noop_rate["per_second"]),
    }


def measure_embedded(
    log_dir: Path, directory: Path, *, payments_count: int, noops: int, workers: int
) -> dict[str, Any]:
    """The demo's embedded stack in a process of its own, driven from here: once for the
    payments, once more (a fresh stack, so an empty in-memory queue) for the no-ops."""
    processes = ProcessManager(log_dir)
    counter = Counter()
    try:
        info = _start_embedded(processes, directory / "payments", workers, counter, noops=0)
        engine = sa.create_engine(f"sqlite:///{info['database']}")
        try:
            run = secrets.token_hex(4)
            key = info["merchant_key"]
            accepted = asyncio.run(
                fixed_count(
                    info["api_url"],
                    lambda _conn, n: payment_request(key, f"e2e-{run}-{n}"),
                    concurrency=ACCEPT_CONCURRENCY,
                    total=payments_count,
                )
            )
            payments_done = _within(
                lambda: _count_finished(engine) >= payments_count, EMBEDDED_WAIT_SECONDS
            )
            payments_rate = completion_rate(_completion_times(engine))
        finally:
            engine.dispose()
        processes.stop_all()
        _start_embedded(processes, directory / "noops", workers, counter, noops=noops)
        noops_done = counter.wait_for(noops, EMBEDDED_WAIT_SECONDS)
        noop_rate = completion_rate(counter.times)
    finally:
        processes.stop_all()
        counter.close()
    return {
        "worker_threads": workers,
        "accepted": accepted.summary(),
        "payments": {**payments_rate, "all_completed": payments_done},
        "noop": {**noop_rate, "all_completed": noops_done},
        "ratio": ratio(payments_rate["per_second"], noop_rate["per_second"]),
    }


def _start_embedded(
    processes: ProcessManager, directory: Path, workers: int, counter: Counter, *, noops: int
) -> dict[str, Any]:
    directory.mkdir(parents=True)
    ready = directory / "ready.json"
    env = bench_environment({})
    env[ADDRESS_ENV] = counter.address
    command = ["--directory", str(directory), "--workers", str(workers), "--noops", str(noops)]
    stack = processes.start(python_module("bench.embedded", *command), name="embedded", env=env)
    _wait("the embedded stack", lambda: ready.exists() or stack.poll() is not None, 120)
    if stack.poll() is not None:
        raise RuntimeError(f"the embedded stack exited:\n{stack.tail()}")
    info: dict[str, Any] = json.loads(ready.read_text())
    return info


def _count_finished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(payments.c.status.in_(FINISHED))
            ).scalar_one()
        )


def _completion_times(engine: sa.Engine) -> list[float]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(payments.c.completed_at).where(payments.c.completed_at.is_not(None))
        ).scalars()
        return [value.timestamp() for value in rows]
