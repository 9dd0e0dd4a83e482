"""PostgreSQL's session (``orchestrator.db.session``): prepared statements and the
pipelined commit, on psycopg itself.

**Prepared statements.**  The worker's every step and every accept run the same few
statements, each built once with bound parameters and marked ``prepare_once``
(``orchestrator.db.compiled``).  Through SQLAlchemy's execution layer each execution paid
for an execution context, the result's setup and psycopg's column descriptions
(SQLAlchemy reads ``cursor.description`` of every result, one object per column of an
``UPDATE payments … RETURNING``), a large share of a payment's CPU (``payorch bench`` and
docs/performance.md measure it).  Here such a statement is compiled once by SQLAlchemy
and run as a prepared statement on the session's own psycopg connection: same
transaction, same pool checkout.  Any other statement runs through SQLAlchemy.

**The pipelined commit.**  ``write`` statements (run for their effect only: a finish's
outcome, ledger, outbox and provider-call rows) are held back.  A statement that answers
(``one``, ``all``, ``scalar``, ``execute``) sends the held ones first, each answered, as
if they had run when asked.  The ones still held at the commit are sent in psycopg's
pipeline mode with the COMMIT: one round trip for all of them; a failed one is raised
from ``commit()`` as SQLAlchemy's exception, and nothing is committed.  A session closed
without a commit never sends them.  Only the trailing writes, because pipeline mode
spends more system calls on a statement whose answer is read (polls for writing and
reading, a flush each) than it saves.  Nothing SQLAlchemy runs ever meets pipeline
mode: it is entered and left inside ``commit()`` (hazard: a statement SQLAlchemy ran in
pipeline mode would find no result description and read as returning no rows).

What stays SQLAlchemy's: the connection, the transaction and the pool; the error
handling (``Connection._handle_dbapi_exception``: SQLAlchemy's exception, and on a lost
connection the pool invalidated; the partition and restart tests rely on it); the
``before_cursor_execute`` event, fired for every statement sent.

``autocommit_one`` runs one statement as its own transaction on a pooled connection's
psycopg connection, with no SQLAlchemy connection around it (the authentication's read and
the accept's authenticated claim).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import psycopg
import sqlalchemy as sa
from psycopg import pq
from sqlalchemy.engine import Engine

from orchestrator.db.compiled import Compiled, compiled, is_prepared_once
from orchestrator.db.session import Params, Row, Session

# A write held back: its compiled statement and its parameters, one set or a list of them.
_Held = tuple[Compiled, dict[str, Any] | list[dict[str, Any]]]


class PostgresSession(Session):
    def __init__(self, connection: sa.Connection) -> None:
        super().__init__(connection)
        self._held: list[_Held] = []
        autocommit = connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        self.stores_each_statement = autocommit

    def _driver(self) -> psycopg.Connection[Any]:
        return self.connection.connection.driver_connection  # type: ignore[return-value]

    def _prepared(self, statement: sa.Executable, params: Params) -> Compiled | None:
        if not is_prepared_once(statement):
            return None
        first = params if isinstance(params, Mapping) or params is None else params[0]
        found = compiled(statement, self.connection.dialect, first or {})
        return found if found.prepared else None

    # -- the statements ----------------------------------------------------------------------

    def one(self, statement: sa.Executable, params: Params = None) -> Row | None:
        self._send_held()
        found = self._prepared(statement, params)
        if found is None or not isinstance(params, Mapping | None):
            return super().one(statement, params)
        row = self._run(found, found.params(params or {})).fetchone()
        return None if row is None else found.mapping(row)

    def all(self, statement: sa.Executable, params: Params = None) -> list[Row]:
        self._send_held()
        found = self._prepared(statement, params)
        if found is None or not isinstance(params, Mapping | None):
            return super().all(statement, params)
        return [found.mapping(row) for row in self._run(found, found.params(params or {}))]

    def execute(self, statement: sa.Executable, params: Params = None) -> int:
        self._send_held()
        found = self._prepared(statement, params)
        if found is None:
            return super().execute(statement, params)
        return self._send((found, _processed(found, params)))

    def write(self, statement: sa.Executable, params: Params = None) -> None:
        found = self._prepared(statement, params)
        if found is None:
            self.execute(statement, params)
            return
        # Processed now: the caller's values may change before the statement is sent.
        self._held.append((found, _processed(found, params)))

    def _sqlalchemy(self, statement: sa.Executable, params: Params) -> sa.CursorResult[Any]:
        self._send_held()
        return super()._sqlalchemy(statement, params)

    # -- on psycopg ----------------------------------------------------------------------------

    def _run(self, found: Compiled, params: dict[str, Any]) -> psycopg.Cursor[Any]:
        self.connection.dispatch.before_cursor_execute(
            self.connection, None, found.sql, params, None, False
        )
        try:
            return self._driver().execute(found.sql, params, prepare=True)
        except psycopg.Error as error:
            self._raise(error, found.sql, params)

    def _send(self, held: _Held) -> int:
        """Send a statement for its effect; the rows it touched."""
        found, params = held
        if isinstance(params, dict):
            return self._run(found, params).rowcount
        # psycopg pipelines the rows of one executemany: one round trip.
        self.connection.dispatch.before_cursor_execute(
            self.connection, None, found.sql, params, None, True
        )
        try:
            with self._driver().cursor() as cursor:
                cursor.executemany(found.sql, params)
                return cursor.rowcount
        except psycopg.Error as error:
            self._raise(error, found.sql, params)

    def _send_held(self) -> None:
        held, self._held = self._held, []
        for each in held:
            self._send(each)

    def _raise(self, error: psycopg.Error, sql: str, params: Any) -> NoReturn:
        # SQLAlchemy's own handling: the exception it would raise, and on a lost connection
        # the pool invalidated.  (A private method, pinned by the tests that cut the
        # database off mid-statement: tests/integration/test_session_statements.py.)
        self.connection._handle_dbapi_exception(error, sql, params, None, None)

    # -- the transaction -----------------------------------------------------------------------

    def commit(self) -> None:
        if self._held:
            self.send_held_with_commit()
        super().commit()

    def send_held_with_commit(self) -> None:
        """The held writes and the COMMIT in psycopg's pipeline mode: one round trip.  A
        failed statement before the COMMIT makes the server skip it: nothing is committed,
        and the failure is raised.  SQLAlchemy's commit that follows finds the session
        idle, and psycopg sends nothing more."""
        held, self._held = self._held, []
        driver = self._driver()
        pipeline = driver.pipeline()
        pipeline.__enter__()
        failure: BaseException | None = None
        try:
            for found, params in held:
                self.connection.dispatch.before_cursor_execute(
                    self.connection, None, found.sql, params, None, not isinstance(params, dict)
                )
                if isinstance(params, dict):
                    driver.execute(found.sql, params, prepare=True)
                else:
                    with driver.cursor() as cursor:
                        cursor.executemany(found.sql, params)
            # In autocommit each statement committed on its own: nothing to send.
            in_transaction = driver.pgconn.transaction_status != pq.TransactionStatus.IDLE
            if not driver.autocommit and in_transaction:
                driver.execute("COMMIT", prepare=False)
        except BaseException as error:
            # A held statement's answer that arrived while the rest was sent, or an
            # interruption.  Hazard: the pipeline must still be left, or the rollback
            # that follows meets the COMMIT's skipped answer and fails in its place.
            failure = error
        try:
            pipeline.__exit__(type(failure) if failure else None, failure, None)
        except psycopg.Error as error:
            failure = failure or error
        if isinstance(failure, psycopg.Error):
            self._raise(failure, "(statements sent with the commit)", None)
        if failure is not None:
            raise failure

    def rollback(self) -> None:
        self._held = []  # never sent: they were this transaction's
        super().rollback()

    def close(self) -> None:
        self._held = []  # never sent: the transaction rolls back
        super().close()


def _processed(found: Compiled, params: Params) -> dict[str, Any] | list[dict[str, Any]]:
    if params is None or isinstance(params, Mapping):
        return found.params(params or {})
    return [found.params(row) for row in params]


def autocommit_one(
    engine: Engine, statement: sa.Executable, params: Mapping[str, Any]
) -> Row | None:
    """``statement``'s first row, run as a prepared statement in autocommit on a connection
    of the engine's pool (its checkout checks and events), with SQLAlchemy's errors."""
    found = compiled(statement, engine.dialect, params)
    assert found.prepared, "an autocommit statement is compiled once"
    values = found.params(params)
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
            row = connection.execute(found.sql, values, prepare=True).fetchone()
        finally:
            connection.autocommit = False  # as the pool hands connections out
    except psycopg.Error as error:
        pooled.invalidate(error)  # closed and replaced, never handed out again
        raise sa.exc.DBAPIError.instance(
            found.sql,
            values,
            error,
            psycopg.Error,
            # As the engine (hide_parameters): they hold key hashes and idempotency keys.
            hide_parameters=True,
            connection_invalidated=True,
        ) from error
    finally:
        pooled.close()
    return None if row is None else found.mapping(row)
