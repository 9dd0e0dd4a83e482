"""A real uvicorn server for an ASGI app on a free local port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

START_TIMEOUT_SECONDS = 15.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class ServerThread:
    def __init__(self, app: Any, port: int | None = None, host: str = "127.0.0.1") -> None:
        # Bound now and handed to uvicorn, not chosen now and bound later in the thread: on
        # a busy machine another process (another test session's server, any outgoing
        # connection's source port) can take a port in between, and a client would then
        # talk to a stranger's server or the start would fail.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.bind((host, port or 0))
        except OSError:
            self._socket.close()
            raise
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(
            app,
            host=host,
            port=self.port,
            log_level="warning",
            lifespan="on",
            access_log=False,
            # Enough for a storm of concurrent merchants on one event loop.
            backlog=4096,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="api", daemon=True)

    def _serve(self) -> None:
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
