"""``payorch sweeper`` / ``payorch sweep [--once]`` / ``payorch beat`` /
``payorch dispatcher``: lease expiry, retention, and the wake-ups of accepted payments.

Run the loop (``payorch sweeper``), or let Celery beat send ``payorch.sweep`` to the
workers every PAYORCH_SWEEP_INTERVAL_SECONDS (``payorch beat``), or both: concurrent
sweeps never take the same record (``FOR UPDATE SKIP LOCKED`` plus a compare-and-set on
the lease token), so running both only costs a few extra queries.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from orchestrator import metrics, tracing
from orchestrator.bootstrap import Container, bootstrap
from orchestrator.broker_check import shown_broker_url
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import print_json, print_table
from orchestrator.cli.process_setup import (
    MetricsHost,
    MetricsPort,
    log_celery_as_json,
    serve_metrics,
)
from orchestrator.cli.reconcile_job import start_reconcile_job
from orchestrator.cli.start_checks import refuse_unusable_services, service_fields
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.dispatcher import Dispatcher
from orchestrator.engine.dispatcher import start_in_thread as start_dispatcher
from orchestrator.engine.sweep import SweepReport, default_sweeper_name
from orchestrator.logging import capture_standard_logging, get_logger

log = get_logger("payorch.cli")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def sweeper(metrics_port: MetricsPort = None, metrics_host: MetricsHost = "127.0.0.1") -> None:
    """Sweep every PAYORCH_SWEEP_INTERVAL_SECONDS until SIGTERM or Ctrl-C."""
    _run_loop(metrics_port, metrics_host)


def sweep(
    once: Annotated[
        bool, typer.Option("--once", help="One pass, print what it did, exit.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """One sweep pass with --once (prints its report); without it, the same loop as
    'payorch sweeper'."""
    if not once:
        _run_loop(None, "127.0.0.1")
        return
    container = bootstrap(load_settings())
    try:
        report = container.sweeper().run_once()
    finally:
        container.close()
    _print_report(report, as_json=as_json)


def beat(
    schedule_file: Annotated[
        Path, typer.Option(help="Where beat keeps its last-run times.")
    ] = Path("celerybeat-schedule"),
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
) -> None:
    """Run Celery beat: sends payorch.sweep to the workers every sweep interval."""
    from orchestrator.broker import sweep_beat_schedule

    container = bootstrap(load_settings())
    settings = container.settings
    app = container.celery_app
    assert app is not None
    app.conf.beat_schedule = sweep_beat_schedule(settings.sweep_interval_seconds)
    container.close()
    log_celery_as_json(settings, loglevel)
    # Beat only publishes: the broker, not the database (decision 0100).
    refuse_unusable_services("beat", settings, celery_app=app)
    log.info(
        "beat_started",
        interval_seconds=settings.sweep_interval_seconds,
        schedule_file=str(schedule_file),
        broker=shown_broker_url(settings.broker_url),
    )
    try:
        # quiet: no banner, so beat's output is JSON lines like every other process's.
        app.Beat(loglevel=loglevel, schedule=str(schedule_file), quiet=True).run()
    finally:
        log.info("beat_stopped")


def dispatcher(metrics_port: MetricsPort = None, metrics_host: MetricsHost = "127.0.0.1") -> None:
    """Only the dispatcher (PAYORCH_WAKE_UP=notify): LISTEN for accepted payments and
    publish their tasks, until SIGTERM or Ctrl-C.  'payorch sweeper' runs one already;
    this is for deployments that sweep with 'payorch beat' instead."""
    settings = load_settings()
    tracing.setup("payorch-dispatcher")
    container = bootstrap(settings)
    capture_standard_logging(container.settings)
    if container.settings.wake_up_mode != "notify":
        container.close()
        raise typer.BadParameter(
            "the dispatcher serves PAYORCH_WAKE_UP=notify (PostgreSQL); with 'publish' the "
            "API publishes the tasks itself"
        )
    _refuse_unusable_services("dispatcher", container)
    serve_metrics(metrics_port, metrics_host, metrics.Role.SWEEPER)
    stop = _stop_on_signals()
    try:
        Dispatcher(
            container.settings.database_url,
            container.publisher,
            name=default_sweeper_name(),
            circuit_hold=CircuitHold.of(container.settings),
        ).run(stop, started_with=service_fields(container.settings, broker=True))
    finally:
        container.close()
        tracing.shutdown()


def _refuse_unusable_services(process: str, container: Container) -> None:
    """The database and the broker both: the sweeper and the dispatcher read the one and
    publish to the other (decision 0100).  Closes the container when it exits."""
    try:
        refuse_unusable_services(
            process,
            container.settings,
            engine=container.engine,
            celery_app=container.celery_app,
        )
    except typer.Exit:
        container.close()
        raise


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        # Finish the pass in progress (its transaction is short), then leave.
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def _run_loop(metrics_port: int | None, metrics_host: str) -> None:
    settings = load_settings()
    tracing.setup("payorch-sweeper")  # before the container's first connection
    container = bootstrap(settings)
    # A long-running process: the libraries' lines (SQLAlchemy, the broker client) as JSON.
    capture_standard_logging(settings)
    _refuse_unusable_services("sweeper", container)
    serve_metrics(metrics_port, metrics_host, metrics.Role.SWEEPER)
    stop = _stop_on_signals()
    thread = None
    if container.settings.wake_up_mode == "notify":
        # The sweeper hosts the dispatcher: the process that recovers lost wake-ups also
        # sends the fast ones (a standby when another process's dispatcher is active).
        _, thread = start_dispatcher(
            container.settings.database_url,
            container.publisher,
            name=default_sweeper_name(),
            stop=stop,
            circuit_hold=CircuitHold.of(container.settings),
        )
    # Reconciliation every RECONCILE_EVERY_SECONDS, in a thread of its own: a run takes minutes
    # on a busy account and must not hold up the sweep's passes.
    reconciling = start_reconcile_job(container, stop)
    try:
        container.sweeper().run(
            stop,
            started_with={
                **service_fields(settings, broker=True),
                "wake_up": settings.wake_up_mode,
                "dispatcher": thread is not None,
                "reconcile_every_seconds": settings.reconcile_every_seconds,
            },
        )
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=5)
        if reconciling is not None:
            reconciling.join(timeout=5)
        container.close()
        tracing.shutdown()


def _print_report(report: SweepReport, *, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    print_table(
        "sweep",
        ["taken over", "due retries", "parked", "publish failures", "skipped", "keys purged"],
        [
            [
                len(report.taken_over),
                len(report.due_retries),
                len(report.parked),
                len(report.publish_failures),
                len(report.skipped),
                report.purged_keys,
            ]
        ],
    )
    details = [
        ("taken over", report.taken_over),
        ("due retry", report.due_retries),
        ("parked", report.parked),
        # A wake-up the queue no longer holds, given one more dispatch lease first.
        ("grace", report.graced),
        ("publish failed", report.publish_failures),
        ("skipped", report.skipped),
    ]
    rows = [[what, payment_id] for what, ids in details for payment_id in ids]
    if rows:
        print_table("payments", ["what", "payment_id"], rows)
