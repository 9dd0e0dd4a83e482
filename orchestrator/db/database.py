"""The engine's sessions (``orchestrator.db.session``): the transaction scope, and one
statement as its own transaction.  The implementation is chosen here, by the database."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator.db.engine import READ_ONLY_OPTION
from orchestrator.db.postgres_session import PostgresSession, autocommit_one
from orchestrator.db.session import Row, Session


class Database:
    """The engine's sessions: ``transaction()`` for a unit of work, ``one()`` for a
    statement that is its own transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    def session(self, *, read_only: bool = False, autocommit: bool = False) -> Session:
        """A session in a new transaction; the caller ends it with ``close()``.

        ``autocommit`` (PostgreSQL): each statement is its own transaction: no BEGIN and
        no COMMIT/ROLLBACK round trips (psycopg skips both when the session is idle), and
        no ROLLBACK that would make psycopg deallocate its prepared statements.  Only for
        units whose every statement stands alone.  The pool resets the mode client-side
        when the connection is returned.  ``read_only`` (SQLite): no write lock."""
        connection = self.engine.connect()
        try:
            if autocommit and self.is_postgres:
                connection.execution_options(isolation_level="AUTOCOMMIT")
            if read_only:
                connection.execution_options(**{READ_ONLY_OPTION: True})
            return self._bound(connection)
        except BaseException:
            connection.close()
            raise

    def _bound(self, connection: sa.Connection) -> Session:
        if self.is_postgres and connection.dialect.driver == "psycopg":
            return PostgresSession(connection)
        return Session(connection)

    @contextmanager
    def transaction(self, *, read_only: bool = False) -> Iterator[Session]:
        """The transaction scope: rolled back unless ``commit()`` was called."""
        session = self.session(read_only=read_only)
        try:
            yield session
        finally:
            session.close()

    def one(self, statement: sa.Executable, params: Mapping[str, Any]) -> Row | None:
        """``statement``'s first row, the statement its own transaction (committed when it
        returns).  On PostgreSQL a prepared statement on a pooled connection in
        autocommit, with no unit of work around it (``postgres_session.autocommit_one``)."""
        if self.is_postgres:
            return autocommit_one(self.engine, statement, params)
        read_only = not getattr(statement, "is_dml", False)
        with self.transaction(read_only=read_only) as session:
            row = session.one(statement, params)
            found = None if row is None else dict(row)
            session.commit()
            return found
