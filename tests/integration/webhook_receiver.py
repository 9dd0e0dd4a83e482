"""A local HTTP endpoint that records the webhooks the simulator delivers (tests only)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# How long a test waits for a delivery it expects (a condition, polled; never a fixed sleep).
DELIVERY_DEADLINE_SECONDS = 10.0


@dataclass(frozen=True)
class Received:
    body: bytes
    signature: str | None
    at: float


@dataclass
class WebhookReceiver:
    url: str
    received: list[Received] = field(default_factory=list)
    # The first ``refuse_first`` deliveries are answered 500 (the simulator must retry),
    # every later one 200.
    refuse_first: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, item: Received) -> int:
        with self._lock:
            self.received.append(item)
            return 500 if len(self.received) <= self.refuse_first else 200

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, condition: Callable[[list[Received]], bool], *, what: str) -> list[Received]:
        deadline = time.monotonic() + DELIVERY_DEADLINE_SECONDS
        while True:
            current = self.snapshot()
            if condition(current):
                return current
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; got {len(current)} webhooks")
            time.sleep(0.02)


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    holder: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            item = Received(
                self.rfile.read(length), self.headers.get("Stripe-Signature"), time.time()
            )
            status = holder["receiver"].record(item)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = WebhookReceiver(url=f"http://127.0.0.1:{server.server_port}/stripe/webhooks")
    holder["receiver"] = receiver
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
