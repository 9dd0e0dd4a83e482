"""Serving the simulator over real HTTP: in a background thread (tests, the demo) or in the
foreground (``payorch provider-sim``).

``start_in_thread`` binds the socket itself before the server starts, so ``port=0`` gets a
free port with no race between "find a free port" and "listen on it".
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from devtools.simulator.app import create_app
from devtools.simulator.client import SimulatorAdmin
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.core import Simulator

# How long start-up may take before we call it failed.  Too short: a loaded CI machine
# fails to start the simulator; too long: a real start-up failure takes that long to report.
_START_TIMEOUT_SECONDS = 15.0
# Stalled requests are released on stop; this bounds the wait for connections to close.
_GRACEFUL_SHUTDOWN_SECONDS = 2


def _uvicorn_config(app: Starlette, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        # Keep the embedding process's logging alone; the request log is /_sim/requests.
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )


class RunningSimulator:
    """A simulator serving on ``url`` from a daemon thread.  ``stop()`` (or leaving the
    ``with`` block) releases stalled requests and shuts the server down."""

    def __init__(
        self, *, url: str, simulator: Simulator, server: uvicorn.Server, thread: threading.Thread
    ) -> None:
        self.url = url
        self.simulator = simulator
        self._server = server
        self._thread = thread
        self.admin = SimulatorAdmin(url)

    def stop(self, timeout: float = 10.0) -> None:
        self.simulator.release_stalls()
        self._server.should_exit = True
        self._thread.join(timeout)
        self.admin.close()
        if self._thread.is_alive():
            raise RuntimeError(f"the provider simulator at {self.url} did not stop in {timeout}s")

    def __enter__(self) -> RunningSimulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_in_thread(
    config: SimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> RunningSimulator:
    app = create_app(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    bound_host, bound_port = sock.getsockname()[:2]
    server = uvicorn.Server(_uvicorn_config(app, bound_host, bound_port))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported to the starting thread below
            failure.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"provider-sim:{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError("the provider simulator failed to start") from (
                failure[0] if failure else None
            )
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the provider simulator did not start in {_START_TIMEOUT_SECONDS}s")
        time.sleep(0.01)
    return RunningSimulator(
        url=f"http://{bound_host}:{bound_port}",
        simulator=app.state.simulator,
        server=server,
        thread=thread,
    )


def serve(
    config: SimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 12111
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C / SIGTERM)."""
    app = create_app(config)
    uvicorn.Server(_uvicorn_config(app, host, port)).run()
