"""The accept's one statement on the API's event loop (PostgreSQL, ``WAKE_UP=notify``).

``POST /v1/payments`` for a new key of an active merchant is one statement that
authenticates and claims (``authenticated_claim_statement``); a taken key is that statement
and the read of the record that holds it (its replay).  In a worker thread each costs a
thread hop and the interpreter lock handed between the thread and the event loop; here they
run on asyncio psycopg connections, with no thread at all, and the route serves clearly
more accepts than through the thread path alone (the benchmark, ``payorch bench --only
accept`` and docs/performance.md, measures this).

What keeps this safe to add beside the tested path:

* **Only an active merchant's key is answered here**: a new key's 202, a taken key's
  replay or 422 (the thread path's own ``services.accept.replay_existing``).  Everything
  else (a stale clock sample, an unknown, revoked or ops key, a key whose record is gone)
  makes the caller answer None, and the request is served again from the start by the
  thread path (``routes.payments.serve_accept``), whose answers stay the only ones for
  those cases.  The statement inserted nothing then, so the second run sees what the
  first would have.
* **A request waits briefly for one of the ``CONNECTIONS``, then takes the thread path.**
  At most ``CONNECTIONS`` statements run at once (a semaphore's slots); a request that
  finds them all busy queues on the loop for up to ``SLOT_WAIT_SECONDS``.  Under a burst
  the wait is a few statements long (milliseconds) and far cheaper than the thread path's
  hop; the bound keeps a stalled database (every slot stuck until the statement timeout)
  from holding requests on the loop: past it they take the thread path, with its pool,
  its timeout and its 503, as before.  Falling back at once instead of waiting sent a large
  part of a burst's accepts to the thread path, and the route lost most of what this path
  gains.
* **A connection that failed is never reused**: one that raised is closed; an idle one the
  server closed (a restart: its socket is readable) or that outlived the sync pool's recycle
  age is closed at checkout (``engine.why_dead``).  An error in the statement is raised as
  SQLAlchemy's ``DBAPIError``, so the API answers it as it answers the thread path's (503).
  A connection that cannot be opened sends the request to the thread path.
* **Connections are opened lazily** on the loop that serves (one per process), closed when
  the app stops (``create_app``'s lifespan).  The database budget grows by ``CONNECTIONS``
  per API process (docs/reference/configuration.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator import metrics
from orchestrator.db import prebuilt
from orchestrator.db.clock import Clock, sampled_now
from orchestrator.db.direct import AuthenticatedClaimStatement
from orchestrator.db.engine import POOL_RECYCLE_SECONDS, postgres_options, why_dead
from orchestrator.db.repositories.payments import BY_KEY
from orchestrator.db.repositories.rows import to_payment
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.settings import Settings

# Connections this path may hold per API process.  Each runs one short statement at a
# time, so a few serve a large burst; each one more is taken from the database's budget
# (docs/reference/configuration.md) in every API process.
CONNECTIONS = 4
# How long a request waits for one of them before the thread path serves it: many
# statements' time on a healthy database, short beside a client's timeout.
SLOT_WAIT_SECONDS = 0.5
APPLICATION_NAME = "payorch-accept-loop"

Found = tuple[tuple[ApiClient, str] | None, bool]
Row = tuple[Any, ...]


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
        # Idle connections.  Only a slot's holder opens one, and only when none is idle,
        # so idle + in use never exceeds the slots.
        self._idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        self._slots = asyncio.Semaphore(CONNECTIONS)
        self._slot_wait_seconds = SLOT_WAIT_SECONDS
        self.waiting = 0  # requests queued for a slot right now
        self._closed = False

    def now(self) -> datetime | None:
        """The database clock when it needs no round trip; None: take the thread path."""
        return sampled_now(self._engine, self._clock)

    async def __call__(self, key_hash: str, values: dict[str, Any], notify: bool) -> Found | None:
        """As ``DirectAuthenticatedClaim``; None when no connection could be had in time."""
        statement = AuthenticatedClaimStatement(self._engine.dialect, key_hash, values, notify)
        ran = await self._fetch_one(statement.sql, statement.params)
        return None if ran is None else statement.answer(ran[0])

    async def find_by_key(self, client_id: str, idempotency_key: str) -> PaymentRecord | None:
        """The record holding a taken key, for its replay (``PaymentRepository.find_by_key``).
        None when there is none (retention purged it) or no connection could be had: the
        thread path answers either."""
        given = {"client_id": client_id, "idempotency_key": idempotency_key}
        compiled = prebuilt.compiled_statement(BY_KEY, self._engine.dialect, given)
        ran = await self._fetch_one(compiled.sql, compiled.params(given))
        if ran is None or ran[0] is None:
            return None
        return to_payment(compiled.mapping(ran[0]))

    async def _fetch_one(self, sql: str, params: dict[str, Any]) -> tuple[Row | None] | None:
        """The statement's first row (in a 1-tuple), or None when no connection could be
        had in time."""
        if self._closed:
            return None
        if not await self._take_slot():
            metrics.ACCEPT_LOOP_FALLBACKS.labels(reason="busy").inc()
            return None
        try:
            checked_out = await self._checkout()
            if checked_out is None:
                metrics.ACCEPT_LOOP_FALLBACKS.labels(reason="connect_failed").inc()
                return None
            return (await self._run(checked_out, sql, params),)
        finally:
            self._slots.release()

    async def _take_slot(self) -> bool:
        if not self._slots.locked():
            return await self._slots.acquire()  # free: returns without suspending
        self.waiting += 1
        try:
            async with asyncio.timeout(self._slot_wait_seconds):
                return await self._slots.acquire()
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1

    async def _run(
        self,
        checked_out: tuple[psycopg.AsyncConnection[Any], float],
        sql: str,
        params: dict[str, Any],
    ) -> Row | None:
        connection, opened_at = checked_out
        try:
            cursor = await connection.execute(sql, params, prepare=True)
            row = await cursor.fetchone()
        except psycopg.Error as error:
            await _close_quietly(connection)
            raise sa.exc.DBAPIError.instance(
                sql,
                params,
                error,
                psycopg.Error,
                # As the engine (hide_parameters): they hold key hashes and idempotency keys.
                hide_parameters=True,
                connection_invalidated=True,
            ) from error
        except BaseException:
            # Cancelled mid-statement: what the connection holds is unknown.
            await _close_quietly(connection)
            raise
        if self._closed:  # the app stopped while this statement ran
            await _close_quietly(connection)
        else:
            self._idle.append((connection, opened_at))
        return row

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await _close_quietly(connection)

    async def _checkout(self) -> tuple[psycopg.AsyncConnection[Any], float] | None:
        """An idle live connection, or a new one (the caller holds a slot)."""
        while self._idle:
            connection, opened_at = self._idle.pop()
            too_old = time.monotonic() - opened_at > POOL_RECYCLE_SECONDS
            if too_old or why_dead(connection) is not None:
                await _close_quietly(connection)
                continue
            return connection, opened_at
        try:
            connection = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, **self._connect_args
            )
        except psycopg.Error:
            # The thread path answers (its pool may still hold live connections; if the
            # database is down, it answers the outage's 503 as it always has).
            return None
        return connection, time.monotonic()


async def _close_quietly(connection: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(psycopg.Error):  # already broken: nothing left to release
        await connection.close()
