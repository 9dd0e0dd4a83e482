"""Serving the Adyen simulator over real HTTP: in a background thread (tests, the demo) or
in the foreground (``python -m devtools.adyen_simulator``, ``payorch provider-sim
--provider adyen``).

``start_in_thread`` binds the socket before the server starts (``devtools.threaded_server``),
so ``port=0`` gets a free port with no race.
"""

from __future__ import annotations

from types import TracebackType

from devtools.adyen_simulator.app import API_VERSION, create_app
from devtools.adyen_simulator.client import AdyenSimulatorAdmin
from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.core import AdyenSimulator
from devtools.threaded_server import ThreadedServer, serve_in_foreground


class RunningAdyenSimulator:
    """A simulator serving on ``url`` from a daemon thread.  ``checkout_url`` is the API
    root with the version (``http://127.0.0.1:PORT/v71``); ``admin`` the ``/_sim`` client.
    ``stop()`` (or leaving the ``with`` block) releases stalled requests and shuts down."""

    def __init__(self, *, served: ThreadedServer, simulator: AdyenSimulator) -> None:
        self.url = url = served.url
        self.checkout_url = f"{url}/{API_VERSION}"
        self.simulator = simulator
        self._served = served
        self.admin = AdyenSimulatorAdmin(url)

    def stop(self, timeout: float = 10.0) -> None:
        self.simulator.release_stalls()
        try:
            self._served.stop(timeout)
        finally:
            self.admin.close()

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
    served = ThreadedServer.start(app, host=host, port=port, name="Adyen simulator")
    return RunningAdyenSimulator(served=served, simulator=app.state.simulator)


def serve(
    config: AdyenSimulatorConfig | None = None, host: str = "127.0.0.1", port: int = 12112
) -> None:
    """Serve in the foreground until interrupted (Ctrl-C / SIGTERM)."""
    serve_in_foreground(create_app(config), host, port)
