"""Exception handlers: everything that escapes a route becomes a problem document.

Database outages answer 503 with ``Retry-After`` (the request may be retried safely: the
idempotency key makes the retry harmless); anything unexpected answers a 500 problem
with no trace, and the trace goes to the log.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from orchestrator.api.problems import Problem, problem_response
from orchestrator.db.unreachable import database_trouble, one_line
from orchestrator.logging import get_logger
from orchestrator.validation_messages import error_message

log = get_logger(__name__)

DATABASE_RETRY_AFTER = "5"
_KEY_LOCATIONS = {("header", "Idempotency-Key"), ("query", "idempotency_key")}


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(exc, instance=request.url.path)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    key_errors = [tuple(e["loc"][:2]) for e in errors if tuple(e["loc"][:2]) in _KEY_LOCATIONS]
    if key_errors:
        where = (
            "an 'Idempotency-Key' header"
            if key_errors[0][0] == "header"
            else "an 'idempotency_key' parameter"
        )
        problem = Problem(
            400,
            "invalid-idempotency-key",
            f"Send {where} of 1-255 printable ASCII characters, unique per logical payment.",
        )
    else:
        fields = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": error_message(e)}
            for e in errors
        ]
        listed = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        problem = Problem(400, "invalid-request", f"Fix these fields: {listed}", errors=fields)
    return problem_response(problem, instance=request.url.path)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "invalid-request")
    detail = {
        404: f"There is no resource at {request.url.path}.",
        405: f"{request.method} is not allowed on {request.url.path}.",
    }.get(exc.status_code, str(exc.detail))
    status = exc.status_code if exc.status_code in (404, 405) else 400
    headers = dict(exc.headers or {})
    if status == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem_response(Problem(status, slug, detail, headers=headers), request.url.path)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path.  Starlette's own 405 names only the
    methods of the first route whose path matched, and FastAPI makes one route per method:
    ``POST /v1/payments`` would answer ``Allow: POST`` though ``GET`` is served too.  Each
    method is asked of the router as a request would be (``matches``), so routers that
    FastAPI nests lazily are searched as the request itself was."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]


# Every method a route here can serve, in the order Allow lists them.
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def _on_database_down(request: Request, exc: Exception) -> JSONResponse:
    # The cause in the driver's words ("Connection refused", "database … does not exist"),
    # for the log only: the client learns that it may retry, not how our database fails.
    trouble = database_trouble(exc)
    log.warning(
        "database_unavailable",
        error=type(exc).__name__,
        cause=trouble.cause if trouble is not None else one_line(str(exc)),
        check=trouble.hint if trouble is not None else None,
        path=request.url.path,
    )
    return problem_response(
        Problem(
            503,
            "service-unavailable",
            "The database is unavailable. Retry after the Retry-After delay; with the same "
            "Idempotency-Key a retry cannot create a second payment.",
            headers={"Retry-After": DATABASE_RETRY_AFTER},
        ),
        instance=request.url.path,
    )


async def _on_database_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DBAPIError)
    if exc.connection_invalidated or _is_unavailable(exc):
        return await _on_database_down(request, exc)
    return await _on_unexpected(request, exc)


def _is_unavailable(exc: DBAPIError) -> bool:
    # psycopg's OperationalError covers refused connections, server shutdowns, admin
    # terminations and statement timeouts: all transient from the client's view.
    name = type(exc.orig).__name__ if exc.orig is not None else ""
    return name in {"OperationalError", "AdminShutdown", "QueryCanceled", "CannotConnectNow"} or (
        "OperationalError" in type(exc).__name__
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled_error", path=request.url.path, exc_info=exc)
    return problem_response(
        Problem(500, "internal-error", "An unexpected error occurred; it has been logged."),
        instance=request.url.path,
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(PoolTimeoutError, _on_database_down)
    app.add_exception_handler(DBAPIError, _on_database_error)
    app.add_exception_handler(Exception, _on_unexpected)
