"""The API under test, with one extra route for the baseline: ``POST /_bench/bare``.

The production app is built exactly as ``payorch api`` builds it (``app_from_environment``:
settings from ``PAYORCH_*``, the composition root, the middleware, the error handlers), and
served with the same uvicorn settings as ``payorch api``.  The bench then adds one route to
that app object; the production code knows nothing of it.

The bare route does everything ``POST /v1/payments`` does that needs neither the database
nor the broker: the same middleware (request id, access log), the same ``Idempotency-Key``
header check, the same defensive JSON body reader and strict ``PaymentCreate`` validation,
the same thread-pool dispatch of a synchronous handler, a JSON answer of similar size.  What
it skips is authentication (one indexed read), the idempotent claim (one INSERT … ON
CONFLICT and its commit), the publish (a confirmed AMQP publish) and the representation of
the stored record.  The ratio ours/bare is therefore the cost of that work.

Run as ``python -m bench.server --host H --port P`` with the ``PAYORCH_*`` environment.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from orchestrator.api.accept_route import accept_route
from orchestrator.api.asgi import app_from_environment
from orchestrator.api.body import parse_model
from orchestrator.api.deps import IdempotencyKey, JsonBody
from orchestrator.api.routes.payments import create_payment, serve_accept
from orchestrator.api.schemas import PaymentCreate
from orchestrator.cli.http_protocol import server_options

BARE_PATH = "/_bench/bare"
# ``POST /v1/payments`` served by its thread path only (no statement on the event loop):
# the production route's shape before the loop took its common case (docs/performance.md).
THREADS_ACCEPT_PATH = "/_bench/accept-threads"


def add_bare_route(app: FastAPI) -> None:
    def bare(body: JsonBody, idempotency_key: IdempotencyKey) -> JSONResponse:
        payload = parse_model(PaymentCreate, body)
        return JSONResponse(
            {
                "id": "pay_" + "0" * 32,
                "status": "processing",
                "amount": payload.amount,
                "currency": payload.currency,
                "payment_method": payload.payment_method,
                "idempotency_key": idempotency_key,
            },
            status_code=202,
            headers={"Location": f"{BARE_PATH}/pay_{'0' * 32}", "Retry-After": "1"},
        )

    app.add_api_route(BARE_PATH, bare, methods=["POST"], status_code=202, include_in_schema=False)


def add_threads_accept_route(app: FastAPI) -> None:
    router = APIRouter()
    router.add_api_route(
        THREADS_ACCEPT_PATH,
        create_payment,
        methods=["POST"],
        status_code=202,
        include_in_schema=False,
        route_class_override=accept_route(serve_accept),
    )
    app.include_router(router)


def app_with_bare_route() -> FastAPI:
    app = app_from_environment()
    add_bare_route(app)
    if not app.state.container.settings.is_sqlite:
        add_threads_accept_route(app)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    # The same server settings as `payorch api` (orchestrator/cli/api_server.py), one process.
    uvicorn.run(
        "bench.server:app_with_bare_route",
        factory=True,
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
        log_config=None,
        timeout_keep_alive=30,
        **server_options(),  # h11 with the request-head limit, as `payorch api` serves
    )


if __name__ == "__main__":
    main()
