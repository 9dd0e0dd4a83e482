"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from orchestrator import tracing
from orchestrator.api.console.install import install_console
from orchestrator.api.docs import install_docs
from orchestrator.api.errors import install_error_handlers
from orchestrator.api.middleware import RequestContextMiddleware
from orchestrator.api.openapi import install_openapi
from orchestrator.api.routes import (
    captures,
    connector_accounts,
    events,
    health,
    ops_api_keys,
    ops_bulk_retry,
    ops_captures,
    ops_circuits,
    ops_connector_accounts,
    ops_events,
    ops_leases,
    ops_payments,
    ops_reconciliation,
    payment_details,
    payments,
    provider_events,
    refunds,
    routing,
    webhook_endpoints,
)
from orchestrator.bootstrap import Container
from orchestrator.logging import key_digest


def create_app(container: Container) -> FastAPI:
    @asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[None]:
        # Synchronous handlers run in this many threads; each needs at most one pooled DB
        # connection, so keeping it at or under the pool size means a burst of requests
        # waits in the threadpool queue instead of timing out on the connection pool.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = container.settings.api_threads
        # The accept's statement on this loop (POST /v1/payments, accept_route).
        claim = container.async_authenticated_claim()
        served.state.async_claim = claim
        try:
            yield
        finally:
            if claim is not None:
                await claim.close()
            # The spans still buffered, before uvicorn re-raises the signal that stopped
            # it (the process then ends without atexit).  Nothing while traces are off.
            tracing.flush()

    app = FastAPI(title="payorch", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.container = container
    app.state.async_claim = None  # until the lifespan starts
    app.add_middleware(RequestContextMiddleware)
    # Outermost while traces are on (a request span around everything, the accept's
    # included); nothing at all otherwise.
    secret = container.settings.secret_key.get_secret_value()
    tracing.instrument_app(app, key_tag=lambda key: key_digest(secret, key))
    install_error_handlers(app)
    app.include_router(payments.router)
    app.include_router(refunds.router)
    app.include_router(captures.router)
    app.include_router(payment_details.router)
    app.include_router(ops_leases.router)
    app.include_router(ops_bulk_retry.router)
    app.include_router(ops_captures.router)
    app.include_router(ops_payments.router)
    app.include_router(webhook_endpoints.router)
    app.include_router(connector_accounts.router)
    app.include_router(ops_connector_accounts.router)
    app.include_router(ops_circuits.router)
    app.include_router(ops_reconciliation.router)
    app.include_router(ops_api_keys.router)
    app.include_router(routing.router)
    app.include_router(events.router)
    app.include_router(ops_events.router)
    app.include_router(provider_events.router)
    app.include_router(health.router)
    install_console(app)
    install_docs(app)
    install_openapi(app)
    return app
