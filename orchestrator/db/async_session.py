"""The asyncio variant of the session (``orchestrator.db.session``): ``one``, ``all`` and
``execute``, each statement its own transaction, for the accept on the API's event loop.

``POST /v1/payments`` for a new key of an active merchant is one statement that
authenticates and claims (``payments.authenticated_claim_statement``); a taken key is that
statement and the read of the record that holds it (its replay).  In a worker thread each
costs a thread hop and the interpreter lock handed between the thread and the event loop;
here they run on asyncio psycopg connections, with no thread at all, and the route serves
clearly more accepts than through the thread path alone (the benchmark, ``payorch bench
--only accept`` and docs/performance.md, measures this).  What the accept does with the
answers is ``orchestrator.db.repositories.accept_claims``.

Two implementations: ``PostgresAsyncDatabase`` (below), and ``ThreadedAsyncDatabase``,
the synchronous ``Database`` in a worker thread (SQLite's).

What keeps the PostgreSQL one safe beside the thread path:

* **A statement waits briefly for one of the ``CONNECTIONS``, then raises
  ``NoConnection``** (the caller takes the thread path).  At most ``CONNECTIONS``
  statements run at once (a semaphore's slots); a request that finds them all busy queues
  on the loop for up to ``SLOT_WAIT_SECONDS``.  Under a burst the wait is a few statements
  long and far cheaper than the thread path's hop; the bound keeps a stalled database
  (every slot stuck until the statement timeout) from holding requests on the loop: past
  it they take the thread path, with its pool, its timeout and its 503, as before.
  Falling back at once instead of waiting sent a large part of a burst's accepts to the
  thread path, and the route lost most of what this path gains.
* **A connection that failed is never reused**: one that raised is closed; an idle one the
  server closed (a restart: its socket is readable) or that outlived the sync pool's recycle
  age is closed at checkout (``engine.why_dead``).  An error in the statement is raised as
  SQLAlchemy's ``DBAPIError``, so the API answers it as it answers the thread path's (503).
  A connection that cannot be opened raises ``NoConnection``.
* **Connections are opened lazily** on the loop that serves (one per process), closed when
  the app stops (``create_app``'s lifespan).  The database budget grows by ``CONNECTIONS``
  per API process (docs/reference/configuration.md).
* **Statements are compiled once and run prepared** (``orchestrator.db.compiled``), in
  autocommit: each is its own transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any, Protocol

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator import metrics
from orchestrator.db.compiled import Compiled, compiled
from orchestrator.db.database import Database
from orchestrator.db.engine import POOL_RECYCLE_SECONDS, postgres_options, why_dead
from orchestrator.db.session import Row
from orchestrator.settings import Settings

# Connections this path may hold per API process.  Each runs one short statement at a
# time, so a few serve a large burst; each one more is taken from the database's budget
# (docs/reference/configuration.md) in every API process.
CONNECTIONS = 4
# How long a request waits for one of them before the thread path serves it: many
# statements' time on a healthy database, short beside a client's timeout.
SLOT_WAIT_SECONDS = 0.5
APPLICATION_NAME = "payorch-accept-loop"


class NoConnection(Exception):
    """No connection could be had in time (all busy, or none could be opened): nothing was
    sent, and the caller serves the request another way."""


class AsyncDatabase(Protocol):
    """Each statement its own transaction (autocommit), awaited on the event loop."""

    engine: Engine

    async def one(self, statement: sa.Executable, params: Mapping[str, Any]) -> Row | None:
        """The first row (columns by name), or None."""

    async def all(self, statement: sa.Executable, params: Mapping[str, Any]) -> list[Row]:
        """Every row."""

    async def execute(self, statement: sa.Executable, params: Mapping[str, Any]) -> int:
        """The number of rows the statement touched."""

    async def close(self) -> None:
        """Close its connections (the API's lifespan, at shutdown)."""


class ThreadedAsyncDatabase:
    """SQLite's: the synchronous ``Database`` in a worker thread."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self.engine = database.engine

    async def one(self, statement: sa.Executable, params: Mapping[str, Any]) -> Row | None:
        return await asyncio.to_thread(self._database.one, statement, params)

    async def all(self, statement: sa.Executable, params: Mapping[str, Any]) -> list[Row]:
        def run() -> list[Row]:
            with self._database.transaction() as session:
                rows: list[Row] = [dict(row) for row in session.all(statement, params)]
                session.commit()
                return rows

        return await asyncio.to_thread(run)

    async def execute(self, statement: sa.Executable, params: Mapping[str, Any]) -> int:
        def run() -> int:
            with self._database.transaction() as session:
                count = session.execute(statement, params)
                session.commit()
                return count

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        return None


Checkout = tuple[psycopg.AsyncConnection[Any], float]


class PostgresAsyncDatabase:
    """PostgreSQL's: prepared statements on a few asyncio psycopg connections of its own
    (see the module)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        assert engine.dialect.name == "postgresql", "asyncio psycopg is PostgreSQL's"
        self.engine = engine
        url = engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._connect_args: dict[str, Any] = dict(postgres_options(settings)["connect_args"])
        # Told apart from the pool's in pg_stat_activity.
        self._connect_args["application_name"] = APPLICATION_NAME
        # Idle connections.  Only a slot's holder opens one, and only when none is idle,
        # so idle + in use never exceeds the slots.
        self._idle: list[Checkout] = []
        self._slots = asyncio.Semaphore(CONNECTIONS)
        self._slot_wait_seconds = SLOT_WAIT_SECONDS
        self.waiting = 0  # requests queued for a slot right now
        self._closed = False

    async def one(self, statement: sa.Executable, params: Mapping[str, Any]) -> Row | None:
        found = compiled(statement, self.engine.dialect, params)
        cursor = await self._run(found, params)
        row = await cursor.fetchone()
        return None if row is None else found.mapping(row)

    async def all(self, statement: sa.Executable, params: Mapping[str, Any]) -> list[Row]:
        found = compiled(statement, self.engine.dialect, params)
        cursor = await self._run(found, params)
        return [found.mapping(row) for row in await cursor.fetchall()]

    async def execute(self, statement: sa.Executable, params: Mapping[str, Any]) -> int:
        found = compiled(statement, self.engine.dialect, params)
        return (await self._run(found, params)).rowcount

    async def _run(self, found: Compiled, params: Mapping[str, Any]) -> psycopg.AsyncCursor[Any]:
        """The statement run on a connection of its own; NoConnection when none could be
        had in time.  The cursor's rows were fetched with it (the connection is back)."""
        assert found.prepared, "an asyncio statement is compiled once"
        values = found.params(params)
        if self._closed:
            raise NoConnection("closed")
        if not await self._take_slot():
            metrics.ACCEPT_LOOP_FALLBACKS.labels(reason="busy").inc()
            raise NoConnection("busy")
        try:
            checked_out = await self._checkout()
            if checked_out is None:
                metrics.ACCEPT_LOOP_FALLBACKS.labels(reason="connect_failed").inc()
                raise NoConnection("connect_failed")
            return await self._send(checked_out, found.sql, values)
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

    async def _send(
        self, checked_out: Checkout, sql: str, params: dict[str, Any]
    ) -> psycopg.AsyncCursor[Any]:
        connection, opened_at = checked_out
        try:
            cursor = connection.cursor()
            await cursor.execute(sql, params, prepare=True)
            # Its rows arrive now, before the connection goes back (a client-side cursor
            # holds them).
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
        return cursor

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await _close_quietly(connection)

    async def _checkout(self) -> Checkout | None:
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
