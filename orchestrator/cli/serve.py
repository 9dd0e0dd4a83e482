"""Long-running processes: the API server and the Celery worker."""

from __future__ import annotations

import os
from typing import Annotated

import typer
import uvicorn

from orchestrator.bootstrap import bootstrap
from orchestrator.settings import Settings


def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[int, typer.Option(help="Server processes.")] = 1,
) -> None:
    """Serve the HTTP API (uvicorn)."""
    Settings()  # refuse bad configuration before binding a port
    uvicorn.run(
        "orchestrator.api.asgi:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # our middleware logs requests as structured JSON
        log_level="warning",
        # Keep-alive longer than typical client pools so idle connections are reused.
        timeout_keep_alive=30,
    )


def worker(
    concurrency: Annotated[int, typer.Option(help="Pool processes.")] = 2,
    pool: Annotated[str, typer.Option(help="prefork (default), solo or threads.")] = "prefork",
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
) -> None:
    """Run a Celery worker that processes payments."""
    container = bootstrap()
    app = container.celery_app
    assert app is not None
    # The parent builds no engine of its own use; pool children build theirs after fork.
    container.close()
    argv = [
        "worker",
        f"--concurrency={concurrency}",
        f"--pool={pool}",
        f"--loglevel={loglevel}",
        f"--hostname=payorch@{os.uname().nodename}.{os.getpid()}",
        "--without-gossip",
        "--without-mingle",
    ]
    app.worker_main(argv)
