"""Long-running processes: the API server and the Celery worker.

Both refuse bad configuration before they start anything, through
``orchestrator.cli.config.load_settings`` like every other command.

Metrics: the API serves ``/metrics`` on its own port; a worker serves them on
``--metrics-port`` (see ``orchestrator.metrics`` for why one port per process).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import warnings
from typing import Annotated, Any

import typer
import uvicorn
from uvicorn.supervisors import Multiprocess

from orchestrator import metrics
from orchestrator.bootstrap import bootstrap
from orchestrator.broker import (
    ADAPTIVE_PREFETCH_STEP,
    PREFETCH_FLOOR_CONF,
    THREADS_POOL_ALIAS,
    THREADS_POOL_CLASS,
)
from orchestrator.cli.config import load_settings
from orchestrator.cli.worker_pool import (
    DEFAULT_POOL,
    POOLS,
    REFUSED_POOLS,
    apply_connection_sizing,
    connection_sizing,
    default_concurrency,
)
from orchestrator.cli.worker_processes import default_processes, run_forked, split_concurrency
from orchestrator.logging import capture_standard_logging, configure_logging, get_logger
from orchestrator.settings import Settings

log = get_logger("payorch.cli")
UVICORN_STARTUP_FAILURE = 3  # what ``uvicorn.run`` exits with when the server never started

MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics of this process on this port (GET /metrics).",
    ),
]
MetricsHost = Annotated[str, typer.Option("--metrics-host", help="Interface for --metrics-port.")]


def use_multiprocess_metrics() -> None:
    """Make sure prometheus_client runs in multiprocess mode, for commands whose work
    happens in several processes (a prefork worker's pool, ``api --workers N``).

    prometheus_client chooses its mode once, when first imported, and the CLI imported it
    long before this runs.  So without ``PROMETHEUS_MULTIPROC_DIR`` this sets it to a new
    private directory and starts the same command again in this process (``exec``: same
    pid, same arguments), removing the directory when that process exits.  An operator
    may set the variable instead (e.g. to a tmpfs): it must name an empty directory.
    """
    if metrics.multiprocess_mode():
        owned = os.environ.get("PAYORCH_METRICS_DIR_OWNER")
        if owned == str(os.getpid()):
            directory = os.environ[metrics.MULTIPROC_DIR_ENV]
            atexit.register(_remove_if_owner, directory, os.getpid())
        return
    os.environ[metrics.MULTIPROC_DIR_ENV] = tempfile.mkdtemp(prefix="payorch-metrics-")
    os.environ["PAYORCH_METRICS_DIR_OWNER"] = str(os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)  # noqa: S606 - our own command line, again


def _remove_if_owner(directory: str, owner: int) -> None:
    # Forked pool children inherit atexit handlers; only the process that made it cleans up.
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8000,
    workers: Annotated[int, typer.Option(help="Server processes.")] = 1,
) -> None:
    """Serve the HTTP API (uvicorn)."""
    settings = load_settings()  # refuse bad configuration before binding a port
    # This process's own lines (with --workers N, the supervisor's) are JSON lines too;
    # each server process configures its own in the app factory.
    configure_logging(settings)
    capture_standard_logging(settings)
    if workers > 1:
        # Each server process counts its own requests; /metrics must show their sum.
        use_multiprocess_metrics()
    config = uvicorn.Config(
        "orchestrator.api.asgi:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # our middleware logs requests as structured JSON
        log_level="warning",
        # uvicorn's own lines (refused requests, bind errors) go through our JSON renderer.
        log_config=None,
        # Keep-alive longer than typical client pools so idle connections are reused.
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    if workers == 1:
        config.load()  # build the app first: a failure here is not "listening"
    # Bind here rather than inside uvicorn, so that the one start-up line can say where
    # the API listens (uvicorn's own "running on" line is below our log level).
    sock = config.bind_socket()
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    log.info(
        "api_listening", url=f"http://{shown_host}:{bound_port}", workers=workers, pid=os.getpid()
    )
    try:
        if workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    if workers == 1 and not server.started:
        raise typer.Exit(UVICORN_STARTUP_FAILURE)


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
    # The parent builds no engine of its own use; pool children (and the processes forked
    # below) build theirs after the fork.
    container.close()
    if pool == "threads":
        configure_for_threads(app, settings)
    log_celery_as_json(settings, loglevel)

    def run_pool(process: int, share: int) -> None:
        log.info(
            "worker_started",
            pool=pool,
            concurrency=share,
            process=process,
            processes=len(shares),
            # What the pool's containers will use (an operator's variable wins over the sizing).
            db_pool_size=os.environ.get("PAYORCH_DB_POOL_SIZE"),
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
        app.worker_main(argv)

    def serve_metrics() -> None:
        if metrics_port is not None:
            metrics.start_metrics_server(metrics_port, metrics_host, metrics.Role.WORKER)

    if len(shares) == 1:
        serve_metrics()
        run_pool(0, shares[0])
        return
    status = run_forked(
        shares, run_pool, on_child_exit=metrics.forget_process, while_supervising=serve_metrics
    )
    raise typer.Exit(status)


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


def log_celery_as_json(settings: Settings, loglevel: str) -> None:
    """Celery configures logging itself unless someone answers its ``setup_logging``
    signal; we answer it, so its lines (task received, task failed with a traceback) are
    JSON like ours."""
    from celery import signals

    def setup(**_kwargs: Any) -> None:
        capture_standard_logging(settings)
        logging.getLogger("celery").setLevel(loglevel.upper())

    setup()  # now too: Celery warns (running as root, say) before it sets up logging
    signals.setup_logging.connect(setup, weak=False)
    _log_celery_notices()


def _log_celery_notices() -> None:
    """Celery writes its shutdown notices ("worker: Warm shutdown (MainProcess)") straight
    to the terminal with ``safe_say``, around logging and wrapped in blank lines: in a log
    of JSON lines, that is one empty and one non-JSON line per shutdown.  They become log
    records instead.  ``safe_say`` is a module global the signal handlers look up when they
    run, so replacing it is enough; it runs inside a signal handler, which the writer
    allows (its lock is reentrant)."""
    from celery.apps import worker as celery_worker

    notices = logging.getLogger("celery.apps.worker")

    def say(message: str, _file: object = None) -> None:
        notices.warning(message.strip())

    celery_worker.safe_say = say
