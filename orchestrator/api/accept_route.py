"""``POST /v1/payments`` without FastAPI's dependency solving: the accept path's handler.

The route is declared like every other (``routes.payments.create_payment``'s signature:
bearer security, the ``Idempotency-Key`` header, the body), so the OpenAPI document is
FastAPI's own.  Requests are served by ``accept_request`` instead (``AcceptRoute``): the
body read on the event loop, then one thread hop for everything that blocks or costs CPU
(``Serve``: authentication, the validation, the claim; ``routes.payments.serve_accept``).
Why: the five dependencies' solving and a second thread hop cost about as much CPU as a
bare route does in all (the benchmark, ``payorch bench`` and docs/performance.md, measures
this).

The answers and their order are the declared route's: 401/403 (authentication and role),
then 413/415/400 (the body as JSON), then 400 ``invalid-idempotency-key``, then 400 for
the fields, then the claim.  Hazard: a change to the declared signature changes only the
document, not this handler; tests/integration/test_accept_api.py and test_schemathesis.py
hold the two together.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog
from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from orchestrator.api.body import RawBody, json_from_raw, read_raw_body
from orchestrator.api.problems import Problem
from orchestrator.api.role_problems import not_a_merchant
from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, Role
from orchestrator.services.api_keys import authenticate_by

# The declared header's rule (deps.IdempotencyKey): 1-255 printable ASCII characters.
_IDEMPOTENCY_KEY = re.compile(r"[\x20-\x7E]{1,255}")

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
# (container, client, idempotency key, JSON body) -> the answer; runs in the thread.
Accept = Callable[[Container, ApiClient, str, Any], Response]
# (container, request, its body) -> the answer: everything after the body's read, in the
# one thread hop.
Serve = Callable[[Container, Request, RawBody], Response]
# The same on the event loop, for the requests it can answer without blocking; None: not
# this one, ``Serve`` answers it from the start.
OnLoop = Callable[[Container, Request, RawBody], Awaitable[Response | None]]


def unauthorized(detail: str) -> Problem:
    return Problem(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


def bearer_credentials(authorization: str | None) -> str | None:
    """What fastapi.security.HTTPBearer(auto_error=False) gives: the credentials of a
    ``Bearer`` header (any letter case), else None."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if not scheme or not credentials or scheme.lower() != "bearer":
        return None
    return credentials


def merchant(container: Container, request: Request) -> ApiClient:
    """deps.current_client + deps.merchant_client, in the caller's thread."""
    credentials = bearer_credentials(request.headers.get("authorization"))
    if credentials is None:
        raise unauthorized("Send 'Authorization: Bearer <api key>'.")
    client = authenticate_by(container.find_client, credentials)
    if client is None:
        raise unauthorized("The API key is unknown or revoked.")
    bind_client(request, client)
    if client.role is not Role.MERCHANT:
        raise not_a_merchant(request)
    return client


def idempotency_key(value: str | None) -> str:
    if value is None or _IDEMPOTENCY_KEY.fullmatch(value) is None:
        raise Problem(
            400,
            "invalid-idempotency-key",
            "Send an 'Idempotency-Key' header of 1-255 printable ASCII characters, unique "
            "per logical payment.",
        )
    return value


def serve_with(accept: Accept) -> Serve:
    """The declared route's checks in its order, then ``accept``: authentication and role,
    the body as JSON, the ``Idempotency-Key``; ``accept`` validates the fields."""

    def serve(container: Container, request: Request, raw: RawBody) -> Response:
        client = merchant(container, request)
        body = json_from_raw(raw)
        key = idempotency_key(request.headers.get("idempotency-key"))
        return accept(container, client, key, body)

    return serve


def bind_client(request: Request, client: ApiClient) -> None:
    """The authenticated client, for the access log and every log line of the request."""
    request.state.client_id = client.id
    structlog.contextvars.bind_contextvars(client_id=client.id)


def accept_handler(serve: Serve, on_loop: OnLoop | None = None) -> Handler:
    async def accept_request(request: Request) -> Response:
        container: Container = request.app.state.container
        raw = await read_raw_body(request)
        if on_loop is not None:
            answer = await on_loop(container, request, raw)
            if answer is not None:
                return answer
        return await run_in_threadpool(serve, container, request, raw)

    return accept_request


def accept_route(serve: Serve, on_loop: OnLoop | None = None) -> type[APIRoute]:
    """An APIRoute class that documents the endpoint it is given and serves it with
    ``on_loop`` when that answers, else with ``serve`` in a thread."""

    class AcceptRoute(APIRoute):
        def get_route_handler(self) -> Handler:
            return accept_handler(serve, on_loop)

    return AcceptRoute
