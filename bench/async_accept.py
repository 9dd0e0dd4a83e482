"""The accept path as an ``async def`` route, for comparison only: ``POST /_bench/accept-async``.

The same validation, claim, wake-up and answer as ``POST /v1/payments``
(``orchestrator.services.accept.claim_payment`` on a unit of work bound to the
connection), but authentication and the claim run on an asyncio psycopg connection from
SQLAlchemy's asyncio engine: no thread hop at all.  Measured beside the synchronous route
in the same rounds (``bench.accept``), it lost (README, Performance), so production keeps
the synchronous route; this module keeps the comparison reproducible.

PostgreSQL only, ``PAYORCH_WAKE_UP=notify`` only (the bench's production stack).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from orchestrator.api.deps import ContainerDep, IdempotencyKey, JsonBody
from orchestrator.api.problems import Problem
from orchestrator.api.routes.payments import accepted_answer, key_reused, validated_payment
from orchestrator.bootstrap import Container
from orchestrator.db.engine import postgres_options, refuse_dead_connection
from orchestrator.domain.model import ApiClient, Role
from orchestrator.services.accept import IdempotencyKeyReused, claim_payment
from orchestrator.services.api_keys import active_client, plausible_key

ASYNC_ACCEPT_PATH = "/_bench/accept-async"

# An asyncio connection belongs to the loop that opened it: one engine per loop.
_engines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncEngine] = (
    weakref.WeakKeyDictionary()
)
_bearer = HTTPBearer(auto_error=False)


def _engine(container: Container) -> AsyncEngine:
    loop = asyncio.get_running_loop()
    engine = _engines.get(loop)
    if engine is None:
        settings = container.settings
        url = sa.engine.make_url(settings.database_url).set(drivername="postgresql+psycopg")
        engine = create_async_engine(url, **postgres_options(settings))
        event.listen(engine.sync_engine, "checkout", refuse_dead_connection)
        _engines[loop] = engine
    return engine


async def _client(
    container: ContainerDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiClient:
    if credentials is None or not plausible_key(credentials.credentials):
        raise Problem(401, "unauthorized", "Send a valid API key.")
    key = credentials.credentials
    async with _engine(container).connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")

        def read(sync: sa.Connection) -> ApiClient | None:
            with container.bound_uow(sync) as uow:
                return active_client(uow, key)

        client = await connection.run_sync(read)
    if client is None or client.role is not Role.MERCHANT:
        raise Problem(401, "unauthorized", "The API key is unknown or revoked.")
    return client


def add_async_accept_route(app: FastAPI) -> None:
    async def accept_async(
        request: Request,
        container: ContainerDep,
        client: Annotated[ApiClient, Depends(_client)],
        body: JsonBody,
        idempotency_key: IdempotencyKey,
    ) -> Response:
        payload, fingerprint = validated_payment(body)
        async with _engine(container).connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            try:
                accepted = await connection.run_sync(
                    lambda sync: claim_payment(
                        lambda: container.bound_uow(sync),
                        container.settings,
                        client,
                        idempotency_key,
                        payload.to_domain(),
                        fingerprint,
                    )
                )
            except IdempotencyKeyReused as reused:
                raise key_reused(reused) from None
        return accepted_answer(container, accepted)

    app.add_api_route(
        ASYNC_ACCEPT_PATH, accept_async, methods=["POST"], status_code=202, include_in_schema=False
    )
