"""A notification endpoint for tests and manual runs: a small HTTP server in a thread that
records what Adyen (here: the simulator) POSTs and answers ``[accepted]``, or a chosen
failure for the next N deliveries (to exercise the retries).

    with NotificationSink() as sink:
        admin.configure_notifications(sink.url, HMAC_KEY)
        ...
        items = sink.wait_for(lambda items: len(items) >= 2)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class NotificationSink:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._bodies: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._failures: list[int] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with sink._lock:
                    status = sink._failures.pop(0) if sink._failures else 200
                    if status == 200:
                        sink._bodies.append(json.loads(raw))
                        sink._headers.append(dict(self.headers.items()))
                answer = b"[accepted]" if status == 200 else b"not now"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        bound_host, bound_port = self._server.server_address[:2]
        self.url = f"http://{bound_host!s}:{bound_port}/notifications"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="adyen-notification-sink", daemon=True
        )
        self._thread.start()

    def fail_next(self, count: int, status: int = 500) -> None:
        """Answer ``status`` to the next ``count`` deliveries (they are not recorded)."""
        with self._lock:
            self._failures.extend([status] * count)

    def bodies(self) -> list[dict[str, Any]]:
        """Every accepted request body, in arrival order."""
        with self._lock:
            return list(self._bodies)

    def headers(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers)

    def items(self) -> list[dict[str, Any]]:
        """Every accepted NotificationRequestItem, in arrival order (duplicates included)."""
        return [
            wrapper["NotificationRequestItem"]
            for body in self.bodies()
            for wrapper in body.get("notificationItems", [])
        ]

    def clear(self) -> None:
        with self._lock:
            self._bodies.clear()
            self._headers.clear()
            self._failures.clear()

    def wait_for(
        self,
        predicate: Callable[[list[dict[str, Any]]], bool],
        timeout: float = 10.0,
    ) -> list[dict[str, Any]]:
        """The items once ``predicate(items)`` holds; ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            items = self.items()
            if predicate(items):
                return items
            if time.monotonic() > deadline:
                raise TimeoutError(f"notifications so far: {items!r}")
            time.sleep(0.02)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> NotificationSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
