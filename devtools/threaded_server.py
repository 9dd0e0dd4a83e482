"""An ASGI app served by uvicorn from a daemon thread, for the simulators (tests, the demo)
and in the foreground for their command lines.

``ThreadedServer.start`` binds the socket itself before the server starts, so ``port=0``
gets a free port with no race between "find a free port" and "listen on it".
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

# How long start-up may take before we call it failed.  Too short: a loaded CI machine
# fails to start a simulator; too long: a real start-up failure takes that long to report.
START_TIMEOUT_SECONDS = 15.0
# Stalled requests are released on stop; this bounds the wait for connections to close.
GRACEFUL_SHUTDOWN_SECONDS = 2


def uvicorn_config(app: Any, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        # Keep the embedding process's logging alone; the request log is /_sim/requests.
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )


def serve_in_foreground(app: Any, host: str, port: int) -> None:
    """Serve until interrupted (Ctrl-C / SIGTERM)."""
    uvicorn.Server(uvicorn_config(app, host, port)).run()


class ThreadedServer:
    """``app`` serving on ``url`` from a daemon thread until ``stop``."""

    def __init__(self, *, url: str, server: uvicorn.Server, thread: threading.Thread) -> None:
        self.url = url
        self._server = server
        self._thread = thread

    @classmethod
    def start(cls, app: Any, *, host: str, port: int, name: str) -> ThreadedServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        bound_host, bound_port = sock.getsockname()[:2]
        server = uvicorn.Server(uvicorn_config(app, bound_host, bound_port))
        failure: list[BaseException] = []

        def run() -> None:
            try:
                server.run(sockets=[sock])
            except BaseException as exc:  # reported to the starting thread below
                failure.append(exc)
            finally:
                sock.close()

        thread = threading.Thread(target=run, name=f"{name}:{bound_port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not server.started:
            if failure or not thread.is_alive():
                raise RuntimeError(f"the {name} failed to start") from (
                    failure[0] if failure else None
                )
            if time.monotonic() > deadline:
                server.should_exit = True
                raise RuntimeError(f"the {name} did not start in {START_TIMEOUT_SECONDS}s")
            time.sleep(0.01)
        return cls(url=f"http://{bound_host}:{bound_port}", server=server, thread=thread)

    def stop(self, timeout: float) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the server at {self.url} did not stop in {timeout}s")
