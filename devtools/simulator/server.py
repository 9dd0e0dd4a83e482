"""Serving the simulator over real HTTP: in a background thread (tests, the demo) or in the
foreground (``payorch provider-sim``).

``start_in_thread`` binds the socket before the server starts (``devtools.threaded_server``),
so ``port=0`` gets a free port with no race.
"""

from __future__ import annotations

from types import TracebackType

from devtools.simulator.app import create_app
from devtools.simulator.client import SimulatorAdmin
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.core import Simulator
from devtools.threaded_server import ThreadedServer, serve_in_foreground


class RunningSimulator:
    """A simulator serving on ``url`` from a daemon thread.  ``stop()`` (or leaving the
    ``with`` block) releases stalled requests and shuts the server down."""

    def __init__(self, *, served: ThreadedServer, simulator: Simulator) -> None:
        self.url = url = served.url
        self.simulator = simulator
        self._served = served
        self.admin = SimulatorAdmin(url)

    def stop(self, timeout: float = 10.0) -> None:
        self.simulator.release_stalls()
        try:
            self._served.stop(timeout)
        finally:
            self.admin.close()

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
    served = ThreadedServer.start(app, host=host, port=port, name="provider simulator")
    return RunningSimulator(served=served, simulator=app.state.simulator)


def serve(
    config: SimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 12111
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C / SIGTERM)."""
    serve_in_foreground(create_app(config), host, port)
