"""``payorch api``: the HTTP API under uvicorn, one process or several (``--workers``).

It refuses bad configuration before it binds a port, through
``orchestrator.cli.config.load_settings`` like every other command, and a database it
cannot use (exit 69, one log line with the cause).
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Annotated

import typer
import uvicorn
from uvicorn.supervisors import Multiprocess

from orchestrator.cli.config import load_settings
from orchestrator.cli.http_protocol import server_options
from orchestrator.cli.process_setup import MetricsHost, MetricsPort, use_multiprocess_metrics
from orchestrator.cli.start_checks import refuse_unusable_services
from orchestrator.logging import capture_standard_logging, configure_logging, get_logger
from orchestrator.settings import Settings

log = get_logger("payorch.cli")
UVICORN_STARTUP_FAILURE = 3  # what ``uvicorn.run`` exits with when the server never started


def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port).")] = 8000,
    workers: Annotated[int, typer.Option(help="Server processes.")] = 1,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "127.0.0.1",
) -> None:
    """Serve the HTTP API (uvicorn); its metrics only on --metrics-port, never on --port."""
    settings = load_settings()  # refuse bad configuration before binding a port
    # This process's own lines (with --workers N, the supervisor's) are JSON lines too;
    # each server process configures its own in the app factory.
    configure_logging(settings)
    capture_standard_logging(settings)
    _refuse_an_unusable_database(settings)
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
        # h11 with a limit on the request's head (httptools buffers headers unbounded).
        **server_options(),
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
    if metrics_port is not None:
        from orchestrator.bootstrap import bootstrap
        from orchestrator.engine.publisher import NullPublisher
        from orchestrator.ops import metrics_server

        # This process's own container, for the database gauges only (a few connections
        # at most: one scrape at a time reads).
        container = bootstrap(settings, publisher=NullPublisher())
        served = metrics_server.start(container.read_only_uow, port=metrics_port, host=metrics_host)
        log.info("api_metrics_listening", url=f"http://{metrics_host}:{served}/metrics")
    # uvicorn finishes the requests in flight on SIGTERM, then restores the handler it
    # found and raises the signal again so the process ends as signalled: never returning
    # here.  The handler it restores is this one, which writes the stop line first.
    signal.signal(signal.SIGTERM, _log_the_stop_then_end)
    try:
        if workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    if workers == 1 and not server.started:
        raise typer.Exit(UVICORN_STARTUP_FAILURE)
    log.info("api_stopped", pid=os.getpid())


def _log_the_stop_then_end(signum: int, frame: FrameType | None) -> None:
    """The API's stop line, then the signal's default action (the exit status a supervisor
    expects from a process it stopped)."""
    log.info("api_stopped", pid=os.getpid(), signal=signal.Signals(signum).name)
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def _refuse_an_unusable_database(settings: Settings) -> None:
    """Refuse to start, before binding the port, when the database cannot be used
    (decision 0090).  An API that says ``api_listening`` and then answers every request
    503 hides a wrong URL or a database never created behind a healthy-looking start;
    exiting 69 with the cause makes the supervisor's restarts (and their log) say it.  A
    database that goes away later is different: the API stays up, answers 503 and
    ``/readyz`` reports it, so a short outage is not turned into a restart storm.  The
    broker is not checked: under ``WAKE_UP=notify`` the API accepts payments without it,
    and ``/readyz`` reports it."""
    from orchestrator.bootstrap import bootstrap
    from orchestrator.engine.publisher import NullPublisher

    container = bootstrap(settings, publisher=NullPublisher())
    try:
        refuse_unusable_services("api", settings, engine=container.engine)
    finally:
        container.close()
