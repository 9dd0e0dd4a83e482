"""A merchant's webhook receiver for tests: a threaded ``http.server`` on 127.0.0.1.

It verifies every request with the ``standardwebhooks`` library (the receiver side of the
contract) against the secrets it was given, records what arrived, and misbehaves on
demand: a share of answers are 500s, a share hang past the relay's timeout, and while
``down`` every connection is dropped without an answer.  Which request misbehaves is drawn
from a seeded generator, so a run is reproducible in what it asks, not in its timing.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Received:
    webhook_id: str
    verified: bool
    status: int | None  # None: dropped (down) or hung past the relay's timeout
    body: dict[str, Any] | None
    arrived: float  # time.monotonic()


@dataclass
class Behaviour:
    fail_share: float = 0.0  # answered 500
    hang_share: float = 0.0  # held for hang_seconds, then 200 (the relay timed out before)
    hang_seconds: float = 2.0
    status: int = 200  # the answer when nothing misbehaves
    redirect_to: str | None = None  # answer 302 with this Location instead
    seed: int = 13


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A relay killed (or timing out) mid-request resets its connection: expected here.
        return


class WebhookReceiver:
    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.secrets: list[str] = []
        self.received: list[Received] = []
        self.dropped = 0
        self.dropped_ids: list[str] = []
        self._down = threading.Event()
        self._lock = threading.RLock()  # predicates of wait_for read under it too
        self._rng = random.Random(self.behaviour.seed)
        self._changed = threading.Condition(self._lock)
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.on_request: Callable[[WebhookReceiver], None] | None = None

    # -- lifecycle --------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/hooks"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def go_down(self) -> None:
        self._down.set()

    def come_back(self) -> None:
        self._down.clear()

    @property
    def is_down(self) -> bool:
        return self._down.is_set()

    # -- what arrived -----------------------------------------------------------------

    def verified_ids(self) -> set[str]:
        with self._lock:
            return {r.webhook_id for r in self.received if r.verified}

    def delivered_ids(self) -> set[str]:
        """Verified and answered 2xx."""
        with self._lock:
            return {
                r.webhook_id
                for r in self.received
                if r.verified and r.status is not None and 200 <= r.status < 300
            }

    def unverified(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if not r.verified]

    def wait_for(self, predicate: Callable[[WebhookReceiver], bool], timeout: float) -> None:
        """Wait until ``predicate`` holds (checked at every request and every 0.2 s)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"receiver condition not met after {timeout}s: "
                        f"{len(self.received)} requests, {self.dropped} dropped"
                    )
                self._changed.wait(min(remaining, 0.2))

    # -- the handler ------------------------------------------------------------------

    def _verify(self, body: bytes, headers: dict[str, str]) -> bool:
        for secret in list(self.secrets):
            try:
                Webhook(secret).verify(body, headers)
                return True
            except WebhookVerificationError:
                continue
        return False

    def _draw(self) -> str:
        b = self.behaviour
        with self._lock:
            roll = self._rng.random()
        if roll < b.fail_share:
            return "fail"
        if roll < b.fail_share + b.hang_share:
            return "hang"
        return "ok"

    def _record(self, item: Received | None, dropped_id: str = "") -> None:
        with self._changed:
            if item is None:
                self.dropped += 1
                self.dropped_ids.append(dropped_id)
            else:
                self.received.append(item)
            self._changed.notify_all()
        if self.on_request is not None:
            self.on_request(self)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                arrived = time.monotonic()
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if receiver.is_down:
                    # Down: the connection is dropped without an answer.
                    self.close_connection = True
                    receiver._record(None, self.headers.get("webhook-id", ""))
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                verified = receiver._verify(body, headers)
                webhook_id = headers.get("webhook-id", "")
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                behaviour = receiver.behaviour
                verdict = receiver._draw()
                status: int | None
                if verdict == "hang":
                    time.sleep(behaviour.hang_seconds)  # past the relay's read timeout
                    status = None
                    self._answer(200, b"late")
                elif verdict == "fail":
                    status = 500
                    self._answer(500, b"try later")
                elif behaviour.redirect_to is not None:
                    status = 302
                    self._answer(302, b"", location=behaviour.redirect_to)
                else:
                    status = behaviour.status if verified else 400
                    self._answer(status, b"ok" if verified else b"bad signature")
                receiver._record(Received(webhook_id, verified, status, parsed, arrived))

            def _answer(self, status: int, body: bytes, location: str | None = None) -> None:
                try:
                    self.send_response(status)
                    if location is not None:
                        self.send_header("Location", location)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the relay gave up (timeout) and closed its end

        return Handler
