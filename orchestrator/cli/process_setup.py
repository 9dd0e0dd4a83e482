"""What the long-running commands (``api``, ``worker``, ``sweeper``, ``relay``) share: the
``--metrics-port`` options and their server, Prometheus multiprocess mode for commands
whose work happens in several processes, and Celery's log lines as JSON.

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
from typing import Annotated, Any

import typer

from orchestrator import metrics
from orchestrator.logging import capture_standard_logging, get_logger
from orchestrator.settings import Settings

log = get_logger("payorch.cli")

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


def serve_metrics(port: int | None, host: str, role: metrics.Role) -> None:
    """Serve ``/metrics`` on ``--metrics-port`` (when given) and say where, in one
    ``metrics_listening`` line: a scrape target that answers nothing is then told apart
    from one that was never started.  The server is a daemon thread of the process: it
    stops with it, under the process's own stop line."""
    if port is None:
        return
    served = metrics.start_metrics_server(port, host, role)
    shown_host = f"[{host}]" if ":" in host else host
    log.info("metrics_listening", role=role.value, url=f"http://{shown_host}:{served}/metrics")


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
