"""Request ids, access logs and the checks every request passes before any route
(pure ASGI, so streaming and exceptions pass through).

The checks answer with a problem document before the application sees the request:

* headers larger than ``MAX_HEADER_BYTES`` in total: ``431``.  The HTTP server (httptools)
  sets no limit of its own, so without this a client could make every request carry
  megabytes of headers;
* control characters in the decoded path or query string: ``400``.  ``%00`` would
  otherwise reach PostgreSQL, which refuses NUL in text with an error (a 500); no id,
  key or parameter of this API may contain a control character anyway.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any
from urllib.parse import unquote_to_bytes

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator import metrics
from orchestrator.api.problems import Problem, problem_response
from orchestrator.logging import get_logger

log = get_logger("payorch.access")
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# What nginx and h11 allow by default; a real client sends well under 1 KiB (a bearer key,
# an Idempotency-Key of at most 255 characters, a few standard headers).
MAX_HEADER_BYTES = 16 * 1024
_CONTROL_TEXT = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_BYTES = re.compile(rb"[\x00-\x1f\x7f]")


def _refusal(scope: Scope) -> Problem | None:
    size = sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    if size > MAX_HEADER_BYTES:
        return Problem(
            431,
            "request-header-too-large",
            f"The request headers must be at most {MAX_HEADER_BYTES} bytes in total.",
        )
    query: bytes = scope.get("query_string", b"")
    if _CONTROL_TEXT.search(scope["path"]) or _CONTROL_BYTES.search(
        unquote_to_bytes(query.replace(b"+", b" "))
    ):
        return Problem(
            400, "invalid-request", "The URL must not contain control characters (such as %00)."
        )
    return None


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        # A client-chosen id is echoed only when it is harmless in a log line.
        request_id = incoming if _SAFE_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        scope.setdefault("state", {})
        started = time.perf_counter()
        status = 500
        route = "unmatched"  # until the router names one

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers: list[Any] = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            refusal = _refusal(scope)
            if refusal is not None:
                route = "refused"
                response = problem_response(refusal, instance=None)
                await response(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = _route_template(scope, route)
            method = _method_label(scope["method"])
            metrics.HTTP_REQUESTS.labels(method=method, route=route, status=str(status)).inc()
            metrics.HTTP_LATENCY.labels(method=method, route=route).observe(elapsed)
            log.info(
                "http_request",
                method=scope["method"],
                path=_printable(scope["path"]),
                status=status,
                client_id=scope["state"].get("client_id"),
                duration_ms=round(elapsed * 1000, 2),
            )
            structlog.contextvars.clear_contextvars()


_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _route_template(scope: Scope, fallback: str) -> str:
    """The matched route's template (``/v1/payments/{payment_id}``), never the raw path:
    one series per payment id would grow the metrics without bound."""
    matched = scope.get("route")
    path = getattr(matched, "path_format", None)
    return path if isinstance(path, str) else fallback


def _method_label(method: str) -> str:
    # A client may send any token as a method; keep the label set bounded.
    return method if method in _KNOWN_METHODS else "other"


def _printable(path: str) -> str:
    # The access log shows a refused path too; keep it one short, readable line.
    return _CONTROL_TEXT.sub("?", path[:200])
