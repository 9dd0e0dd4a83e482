"""A fake of the Stripe adapter's HTTP transport: canned answers, no network.

The adapter sends through a ``Transport`` (method, URL, body, headers -> urllib3 response).
This one hands each request to a handler as an ``httpx.Request`` (a convenient value with a
parsed URL, query and headers) and turns the handler's ``httpx.Response`` into the urllib3
response the adapter reads.  An exception the handler raises reaches the adapter unchanged,
so a test raises urllib3's errors (``ReadTimeoutError``, ``NewConnectionError``, …) to play a
network failure.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable

import httpx
import urllib3

Handler = Callable[[httpx.Request], httpx.Response]


class FakeStripeTransport:
    """Answers with ``handler`` and remembers every request it was given."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[httpx.Request] = []

    def __call__(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> urllib3.BaseHTTPResponse:
        request = httpx.Request(method, url, headers=headers, content=body or b"")
        self.requests.append(request)
        answer = self.handler(request)
        return urllib3.HTTPResponse(
            body=answer.content,
            headers=urllib3.HTTPHeaderDict(answer.headers.multi_items()),
            status=answer.status_code,
            preload_content=True,
        )


class LocalStripeServer:
    """A real HTTP/1.1 server on loopback answering every GET with ``answer`` (JSON).  It
    records each request's target, its Host header and the client's port (one port per
    connection), so a test sees which connection a request went out on, or that it went
    through a proxy (an absolute URL as the target)."""

    def __init__(self, answer: dict[str, object]) -> None:
        self.paths: list[str] = []
        self.hosts: list[str] = []
        self.client_ports: list[int] = []
        outer = self
        body = json.dumps(answer).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def do_GET(self) -> None:
                outer.paths.append(self.path)
                outer.hosts.append(self.headers.get("Host", ""))
                outer.client_ports.append(self.client_address[1])
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LocalStripeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
