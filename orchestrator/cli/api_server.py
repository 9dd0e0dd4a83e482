"""``payorch api``: the HTTP API under uvicorn, one process or several (``--workers``).

It refuses bad configuration before it binds a port, through
``orchestrator.cli.config.load_settings`` like every other command.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
import uvicorn
from uvicorn.supervisors import Multiprocess

from orchestrator.cli.config import load_settings
from orchestrator.cli.http_protocol import server_options
from orchestrator.cli.process_setup import use_multiprocess_metrics
from orchestrator.logging import capture_standard_logging, configure_logging, get_logger

log = get_logger("payorch.cli")
UVICORN_STARTUP_FAILURE = 3  # what ``uvicorn.run`` exits with when the server never started


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
    try:
        if workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    if workers == 1 and not server.started:
        raise typer.Exit(UVICORN_STARTUP_FAILURE)
