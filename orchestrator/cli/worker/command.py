"""``payorch worker``: a Celery worker that processes payments and operations.

It refuses bad configuration and unsupported pools before it starts anything, and a
database or broker it cannot use (exit 69, one log line with the cause), sizes the
connection pools from its own pool (``pool``), and runs one threads pool per usable CPU
under a supervisor (``processes``).  Each worker process runs the tasks of ``workers/``.
"""

from __future__ import annotations

import os
import warnings
from typing import Annotated, Any

import typer

from orchestrator import metrics, tracing
from orchestrator.bootstrap import bootstrap
from orchestrator.broker import (
    ADAPTIVE_PREFETCH_STEP,
    PREFETCH_FLOOR_CONF,
    THREADS_POOL_ALIAS,
    THREADS_POOL_CLASS,
)
from orchestrator.cli import process_setup
from orchestrator.cli.config import load_settings
from orchestrator.cli.process_setup import (
    MetricsHost,
    MetricsPort,
    log_celery_as_json,
    use_multiprocess_metrics,
)
from orchestrator.cli.start_checks import refuse_unusable_services, service_fields
from orchestrator.cli.worker.pool import (
    DEFAULT_POOL,
    POOLS,
    REFUSED_POOLS,
    apply_connection_sizing,
    connection_sizing,
    default_concurrency,
)
from orchestrator.cli.worker.processes import default_processes, run_forked, split_concurrency
from orchestrator.logging import get_logger
from orchestrator.settings import Settings

log = get_logger("payorch.cli")


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            help=(
                "Tasks at once: threads, shared among the processes (default 128), or pool "
                "processes (prefork, default 2)."
            ),
            min=1,
        ),
    ] = None,
    pool: Annotated[
        str, typer.Option(help="threads (default: I/O-bound provider calls), prefork or solo.")
    ] = DEFAULT_POOL,
    processes: Annotated[
        int | None,
        typer.Option(
            help=(
                "Threads pools run as this many processes, one supervisor "
                "(default: one per usable CPU; 1 for prefork and solo)."
            ),
            min=1,
        ),
    ] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "127.0.0.1",
) -> None:
    """Run a Celery worker that processes payments."""
    if pool in REFUSED_POOLS:
        raise typer.BadParameter(
            f"{pool} is not supported: {REFUSED_POOLS[pool]}.", param_hint="--pool"
        )
    if pool not in POOLS:
        raise typer.BadParameter(
            f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}.", param_hint="--pool"
        )
    if processes is not None and processes > 1 and pool != "threads":
        raise typer.BadParameter(
            f"--processes applies to the threads pool; {pool} runs "
            + ("a process per task already." if pool == "prefork" else "one task.")
            + " Use --concurrency.",
            param_hint="--processes",
        )
    settings = load_settings()
    concurrency = concurrency or default_concurrency(pool)
    shares = split_concurrency(concurrency, processes or default_processes(pool))
    # Before any container is built: the pool's containers (one per prefork child, one per
    # threads-pool process) read their settings from this environment.
    apply_connection_sizing(connection_sizing(pool, max(shares), len(shares)))
    if metrics_port is not None:
        use_multiprocess_metrics()
    container = bootstrap(settings)
    app = container.celery_app
    assert app is not None
    try:
        # Before any "started" line and before the fork: a database or broker this worker
        # cannot use ends it here (exit 69), not in Celery's reconnect loop (decision 0100).
        refuse_unusable_services("worker", settings, engine=container.engine, celery_app=app)
    finally:
        # The parent builds no engine of its own use; pool children (and the processes
        # forked below) build theirs after the fork.
        container.close()
    if pool == "threads":
        configure_for_threads(app, settings)
    log_celery_as_json(settings, loglevel)

    def run_pool(process: int, share: int) -> None:
        # After the fork (run_forked): each worker process has its own exporter thread.
        # Celery imports the tasks (workers.tasks, which instruments them) after this.
        tracing.setup("payorch-worker")
        log.info(
            "worker_started",
            pool=pool,
            concurrency=share,
            process=process,
            processes=len(shares),
            # What the pool's containers will use (an operator's variable wins over the sizing).
            db_pool_size=os.environ.get("PAYORCH_DB_POOL_SIZE"),
            **service_fields(settings, broker=True),
        )
        argv = [
            "--quiet",  # no banner: the log stays one JSON object per line
            "worker",
            f"--concurrency={share}",
            f"--pool={THREADS_POOL_ALIAS if pool == 'threads' else pool}",
            f"--loglevel={loglevel}",
            f"--hostname=payorch@{os.uname().nodename}.{os.getpid()}",
            "--without-gossip",
            "--without-mingle",
        ]
        try:
            status = run_celery_worker(app, argv)
        finally:
            log.info("worker_stopped", pool=pool, process=process)
            tracing.shutdown()
        if status:
            raise typer.Exit(status)

    def serve_metrics() -> None:
        process_setup.serve_metrics(metrics_port, metrics_host, metrics.Role.WORKER)

    if len(shares) == 1:
        serve_metrics()
        run_pool(0, shares[0])
        return
    status = run_forked(
        shares, run_pool, on_child_exit=metrics.forget_process, while_supervising=serve_metrics
    )
    raise typer.Exit(status)


def run_celery_worker(app: Any, argv: list[str]) -> int:
    """``app.worker_main(argv)``, returning the worker's exit status: e.g. 69 when the
    broker refused the worker after its start (``workers.consumer``).  ``worker_main``
    (through ``app.start``) drops it: click's non-standalone ``main`` returns the status
    the ``worker`` command exits with, and ``app.start`` ignores that return.  This is
    ``app.start``'s body with the return kept (the command's first parameter is its
    ``--app``)."""
    from celery.bin.celery import celery as celery_command

    celery_command.params[0].default = app
    try:
        status = celery_command.main(args=argv, standalone_mode=False)
    finally:
        celery_command.params[0].default = None
    return status if isinstance(status, int) else 0


def configure_for_threads(app: Any, settings: Settings) -> None:
    """Two Celery behaviours after a broker connection loss assume tasks can be killed,
    which threads cannot be:

    * cancelling the tasks still running (``worker_cancel_long_running_tasks_on_connection
      _loss``) fails for every one of them (the pool has no ``terminate_job``), with a
      traceback each; they run to their end, and their redelivered copies meet the lease;
    * the prefetch count, reduced by the tasks running at the loss and restored as tasks
      are acknowledged, stayed reduced after those tasks ended (their acknowledgements fail
      on the closed channel): in the chaos suite a reconnected worker took no message for
      over a minute.  With a prefetch of one message per thread, fetching a full window
      after a reconnect costs nothing (the claim decides who acts).
    """
    app.conf.worker_cancel_long_running_tasks_on_connection_loss = False
    app.conf.worker_enable_prefetch_count_reduction = False
    # The prefetch count follows the provider's latency (workers.prefetch_limit), and the
    # pool wakes the thread idle the shortest (workers.thread_pool): with few tasks in
    # flight, few threads stay warm.  Celery's --pool takes a registered name only.
    app.steps["consumer"].add(ADAPTIVE_PREFETCH_STEP)
    app.conf[PREFETCH_FLOOR_CONF] = settings.worker_prefetch_floor
    from celery import concurrency

    concurrency.ALIASES[THREADS_POOL_ALIAS] = THREADS_POOL_CLASS
    # Celery warns at every connection loss that the cancelling will become its default.
    warnings.filterwarnings(
        "ignore", message=r"(?s).*worker_cancel_long_running_tasks_on_connection_loss"
    )
