"""Serving the Adyen simulator over real HTTP: in a background thread (tests, the demo) or
in the foreground (``python -m devtools.adyen_simulator``, ``payorch provider-sim
--provider adyen``).

``start_in_thread`` binds the socket before the server starts, so ``port=0`` gets a free
port with no race.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from devtools.adyen_simulator.app import API_VERSION, create_app
from devtools.adyen_simulator.client import AdyenSimulatorAdmin
from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.core import AdyenSimulator

_START_TIMEOUT_SECONDS = 15.0
_GRACEFUL_SHUTDOWN_SECONDS = 2


def _uvicorn_config(app: Starlette, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )


class RunningAdyenSimulator:
    """A simulator serving on ``url`` from a daemon thread.  ``checkout_url`` is the API
    root with the version (``http://127.0.0.1:PORT/v71``); ``admin`` the ``/_sim`` client.
    ``stop()`` (or leaving the ``with`` block) releases stalled requests and shuts down."""

    def __init__(
        self,
        *,
        url: str,
        simulator: AdyenSimulator,
        server: uvicorn.Server,
        thread: threading.Thread,
    ) -> None:
        self.url = url
        self.checkout_url = f"{url}/{API_VERSION}"
        self.simulator = simulator
        self._server = server
        self._thread = thread
        self.admin = AdyenSimulatorAdmin(url)

    def stop(self, timeout: float = 10.0) -> None:
        self.simulator.release_stalls()
        self._server.should_exit = True
        self._thread.join(timeout)
        self.admin.close()
        if self._thread.is_alive():
            raise RuntimeError(f"the Adyen simulator at {self.url} did not stop in {timeout}s")

    def __enter__(self) -> RunningAdyenSimulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_in_thread(
    config: AdyenSimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> RunningAdyenSimulator:
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

    thread = threading.Thread(target=run, name=f"adyen-sim:{bound_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError("the Adyen simulator failed to start") from (
                failure[0] if failure else None
            )
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the Adyen simulator did not start in {_START_TIMEOUT_SECONDS}s")
        time.sleep(0.01)
    return RunningAdyenSimulator(
        url=f"http://{bound_host}:{bound_port}",
        simulator=app.state.simulator,
        server=server,
        thread=thread,
    )


def serve(
    config: AdyenSimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 12112
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C / SIGTERM)."""
    app = create_app(config)
    uvicorn.Server(_uvicorn_config(app, host, port)).run()
