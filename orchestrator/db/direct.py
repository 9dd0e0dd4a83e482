"""The accept path's two statements on psycopg itself (PostgreSQL): the authentication's
read on the pooled connection, and the claim on a unit of work's connection.

Every authenticated accept reads its client by key hash.  Through SQLAlchemy's execution
layer (a unit of work, the compiled-statement cache, the execution context, the result)
that read cost several times the CPU it costs on the pool's own psycopg connection, with
the same SQL (SQLAlchemy compiles it once, here) as a prepared statement.  The connection
still comes from SQLAlchemy's pool (its checkout checks, its size, its recycling), and the
statement runs in autocommit (one round trip, as the unit of work's ``single_statement``
does).

Errors keep SQLAlchemy's form: a psycopg error is raised as SQLAlchemy's ``DBAPIError``
(an outage is a 503 through the API's handlers), and a connection that failed is
invalidated rather than returned to the pool.

SQLite keeps the unit of work (``Container.find_client``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator.db import prebuilt
from orchestrator.db.clock import Clock, engine_now
from orchestrator.db.repositories.clients import BY_KEY_HASH
from orchestrator.db.repositories.payments import (
    authenticated_claim_statement,
    insert_if_absent_statement,
)
from orchestrator.db.repositories.rows import to_client
from orchestrator.domain.model import ApiClient

Processor = Callable[[Any], Any] | None


class DirectClientLookup:
    """``find(key_hash)``: the client and its stored hash, or None (as
    ``ClientRepository.find_by_key_hash``)."""

    def __init__(self, engine: Engine) -> None:
        assert engine.dialect.name == "postgresql", "direct statements are PostgreSQL's"
        self._engine = engine
        compiled = BY_KEY_HASH.compile(dialect=engine.dialect)
        self._sql = compiled.string
        columns = list(BY_KEY_HASH.selected_columns)
        self._names = [column.name for column in columns]
        self._processors: list[Processor] = [
            column.type.dialect_impl(engine.dialect).result_processor(engine.dialect, None)
            for column in columns
        ]

    def __call__(self, key_hash: str) -> tuple[ApiClient, str] | None:
        row = self._fetch_one({"key_hash": key_hash})
        if row is None:
            return None
        values = {
            name: value if process is None else process(value)
            for name, value, process in zip(self._names, row, self._processors, strict=True)
        }
        return to_client(values), values["key_hash"]

    def _fetch_one(self, params: dict[str, Any]) -> tuple[Any, ...] | None:
        return fetch_one_autocommit(self._engine, self._sql, params)


def fetch_one_autocommit(
    engine: Engine, sql: str, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    """``sql``'s first row, run as a prepared statement in autocommit on a connection of
    the engine's pool (its checkout checks and events), with SQLAlchemy's errors."""
    try:
        pooled = engine.raw_connection()  # the pool's checkout and its events
    except psycopg.Error as error:
        # Engine.connect() wraps a failed connect; the pool's raw checkout does not.
        raise sa.exc.DBAPIError.instance(
            None, None, error, psycopg.Error, connection_invalidated=True
        ) from error
    try:
        connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
        connection.autocommit = True  # one statement, its own transaction
        try:
            return connection.execute(sql, params, prepare=True).fetchone()
        finally:
            connection.autocommit = False  # as the pool hands connections out
    except psycopg.Error as error:
        pooled.invalidate(error)  # closed and replaced, never handed out again
        raise sa.exc.DBAPIError.instance(
            sql,
            params,
            error,
            psycopg.Error,
            # As the engine (hide_parameters): they hold key hashes and idempotency keys.
            hide_parameters=True,
            connection_invalidated=True,
        ) from error
    finally:
        pooled.close()


class DirectClaim:
    """The accept's claim (``PaymentRepository.insert_if_absent``'s statement, built once
    per column set) executed on the psycopg connection under a unit of work's SQLAlchemy
    connection (``orchestrator.db.prebuilt``, as the worker's statements): the unit of work
    still provides the pool checkout, autocommit and the database clock; only SQLAlchemy's
    per-execution layer is skipped, and the CPU it costs on every accept.  The values go
    through their columns' bind processors (UTC timestamps, JSONB), as SQLAlchemy would
    send them."""

    def __init__(self, engine: Engine) -> None:
        assert engine.dialect.name == "postgresql", "direct statements are PostgreSQL's"

    def insert_if_absent(
        self, connection: sa.Connection, values: dict[str, Any], *, wake: bool
    ) -> bool:
        statement = insert_if_absent_statement("postgresql", tuple(sorted(values)), wake)
        return prebuilt.first(connection, statement, values) is not None


class DirectAuthenticatedClaim:
    """The accept's authentication and claim as one statement
    (``authenticated_claim_statement``): one pool checkout and one round trip instead of
    two of each, and no unit of work.  In autocommit the statement is its own
    transaction, so its NOTIFY is sent when it returns.

    ``__call__`` answers the client's row and stored hash (None: no such key) and whether
    the payment was inserted (False: the key is taken, or the client is revoked or not a
    merchant; the caller tells which from the row).  ``now()`` is the database clock as
    a unit of work reads it (``orchestrator.db.clock``)."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        assert engine.dialect.name == "postgresql", "direct statements are PostgreSQL's"
        self._engine = engine
        self._clock = clock

    def now(self) -> datetime:
        return engine_now(self._engine, self._clock)

    def __call__(
        self, key_hash: str, values: dict[str, Any], notify: bool
    ) -> tuple[tuple[ApiClient, str] | None, bool]:
        statement = AuthenticatedClaimStatement(self._engine.dialect, key_hash, values, notify)
        return statement.answer(fetch_one_autocommit(self._engine, statement.sql, statement.params))


class AuthenticatedClaimStatement:
    """``authenticated_claim_statement`` for these values: its SQL, its parameters through
    their bind processors, and ``answer(row)``: the client and its stored hash (None: no
    such key), and whether the payment was inserted."""

    def __init__(
        self, dialect: sa.Dialect, key_hash: str, values: dict[str, Any], notify: bool
    ) -> None:
        statement = authenticated_claim_statement(tuple(sorted(values)), notify)
        given = {**values, "key_hash": key_hash}
        self._compiled = prebuilt.compiled_statement(statement, dialect, given)
        self.sql = self._compiled.sql
        self.params = self._compiled.params(given)

    def answer(self, row: tuple[Any, ...] | None) -> tuple[tuple[ApiClient, str] | None, bool]:
        if row is None:
            return None, False
        found = self._compiled.mapping(row)
        return (to_client(found), found["key_hash"]), found["claimed_rows"] == 1
