"""The demo's merchant: a webhook receiver on 127.0.0.1 that verifies every request with
the ``standardwebhooks`` library, the way docs/api/webhooks.md tells merchants to, and fails a share
of them (500) so the demo shows retries."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class ReceivedWebhook:
    webhook_id: str
    verified: bool
    status: int


class DemoReceiver:
    def __init__(self, *, fail_rate: float = 0.1, seed: int = 0) -> None:
        # One signing secret per endpoint (the demo's merchants each have one, same URL).
        self.secrets: list[str] = []
        self.received: list[ReceivedWebhook] = []
        self._fail_rate = fail_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/webhooks"

    def __enter__(self) -> DemoReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def delivered_ids(self) -> set[str]:
        """Events answered 2xx after their signature verified."""
        with self._lock:
            return {r.webhook_id for r in self.received if r.verified and r.status == 200}

    def counts(self) -> tuple[int, int]:
        """(requests received, requests whose signature verified)."""
        with self._lock:
            return len(self.received), sum(1 for r in self.received if r.verified)

    def _answer(self, body: bytes, headers: dict[str, str]) -> ReceivedWebhook:
        verified = False
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                verified = True
                break
            except WebhookVerificationError:
                continue
        with self._lock:
            fail = self._rng.random() < self._fail_rate
        status = 400 if not verified else (500 if fail else 200)
        received = ReceivedWebhook(headers.get("webhook-id", ""), verified, status)
        with self._lock:
            self.received.append(received)
        return received

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = receiver._answer(body, headers)
                text = {200: b"ok", 400: b"bad signature", 500: b"try again"}[answer.status]
                self.send_response(answer.status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        return Handler
