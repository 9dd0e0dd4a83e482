"""The accept's one statement on the API's event loop (PostgreSQL, ``WAKE_UP=notify``).

``POST /v1/payments`` for a new key of an active merchant is one statement that
authenticates and claims (``authenticated_claim_statement``).  In a worker thread it costs a
thread hop and the interpreter lock handed between the thread and the event loop for every
request; here it runs on an asyncio psycopg connection, with no thread at all.  Measured in
the same runs of ``payorch bench --only accept``: 0.46-0.51 of the bare route against
0.41-0.46 from the thread (bench/RESULTS.md §14).

What keeps this safe to add beside the tested path:

* **Only the new key of an active merchant is answered here.**  Everything else (no
  connection free, a stale clock sample, an unknown, revoked or ops key, a taken key) makes
  ``__call__`` answer None or a row the caller does not accept, and the request is served
  again from the start by the thread path (``routes.payments.serve_accept``), whose
  answers stay the only ones for those cases.  The statement inserted nothing then, so the
  second run sees what the first would have.
* **It never waits for a connection.**  At most ``CONNECTIONS`` are open; when all are busy,
  or a new one cannot be opened, the request takes the thread path (and its pool, its
  timeout, its 503).  No new timeout, no new queue.
* **A connection that failed is never reused**: one that raised is closed; an idle one the
  server closed (a restart: its socket is readable) or that outlived the sync pool's recycle
  age is closed at checkout (``engine.why_dead``).  An error in the statement is raised as
  SQLAlchemy's ``DBAPIError``, so the API answers it as it answers the thread path's (503).
* **Connections are opened lazily** on the loop that serves (one per process), closed when
  the app stops (``create_app``'s lifespan).  The database budget grows by ``CONNECTIONS``
  per API process (README, Configuration).
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator.db.clock import Clock, sampled_now
from orchestrator.db.direct import AuthenticatedClaimStatement
from orchestrator.db.engine import POOL_RECYCLE_SECONDS, postgres_options, why_dead
from orchestrator.domain.model import ApiClient
from orchestrator.settings import Settings

# Connections this path may hold per API process.  One statement of ~1 ms each: 4 serve
# thousands of accepts a second; beyond them the thread path takes the overflow.
CONNECTIONS = 4
APPLICATION_NAME = "payorch-accept-loop"

Found = tuple[tuple[ApiClient, str] | None, bool]


class AsyncAuthenticatedClaim:
    def __init__(self, engine: Engine, clock: Clock, settings: Settings) -> None:
        assert engine.dialect.name == "postgresql", "direct statements are PostgreSQL's"
        self._engine = engine
        self._clock = clock
        url = engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._connect_args: dict[str, Any] = dict(postgres_options(settings)["connect_args"])
        # Told apart from the pool's in pg_stat_activity.
        self._connect_args["application_name"] = APPLICATION_NAME
        self._idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        self._open = 0  # idle + in use
        self._closed = False

    def now(self) -> datetime | None:
        """The database clock when it needs no round trip; None: take the thread path."""
        return sampled_now(self._engine, self._clock)

    async def __call__(self, key_hash: str, values: dict[str, Any], notify: bool) -> Found | None:
        """As ``DirectAuthenticatedClaim``; None when no connection is free."""
        checked_out = await self._checkout()
        if checked_out is None:
            return None
        connection, opened_at = checked_out
        statement = AuthenticatedClaimStatement(self._engine.dialect, key_hash, values, notify)
        try:
            cursor = await connection.execute(statement.sql, statement.params, prepare=True)
            row = await cursor.fetchone()
        except psycopg.Error as error:
            await self._discard(connection)
            raise sa.exc.DBAPIError.instance(
                statement.sql,
                statement.params,
                error,
                psycopg.Error,
                # As the engine (hide_parameters): they hold key hashes and idempotency keys.
                hide_parameters=True,
                connection_invalidated=True,
            ) from error
        except BaseException:
            # Cancelled mid-statement: what the connection holds is unknown.
            await self._discard(connection)
            raise
        if self._closed:  # the app stopped while this statement ran
            await self._discard(connection)
        else:
            self._idle.append((connection, opened_at))
        return statement.answer(row)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await self._discard(connection)

    async def _checkout(self) -> tuple[psycopg.AsyncConnection[Any], float] | None:
        while self._idle:
            connection, opened_at = self._idle.pop()
            too_old = time.monotonic() - opened_at > POOL_RECYCLE_SECONDS
            if too_old or why_dead(connection) is not None:
                await self._discard(connection)
                continue
            return connection, opened_at
        if self._closed or self._open >= CONNECTIONS:
            return None
        self._open += 1
        try:
            connection = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, **self._connect_args
            )
        except psycopg.Error:
            # The thread path answers (its pool may still hold live connections; if the
            # database is down, it answers the outage's 503 as it always has).
            self._open -= 1
            return None
        except BaseException:
            self._open -= 1
            raise
        return connection, time.monotonic()

    async def _discard(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._open -= 1
        with contextlib.suppress(psycopg.Error):  # already broken: nothing left to release
            await connection.close()
