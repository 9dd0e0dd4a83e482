"""The one way to run a statement: a ``Session`` inside a transaction scope.

Every statement the repositories run goes through this small interface::

    one(statement, params)     its first row (columns by name), or None
    all(statement, params)     every row
    scalar(statement, params)  the first column of its first row, or None
    execute(statement, params) run now, answered now: the number of rows it touched
    write(statement, params)   run for its effect only; the session may hold it back
                               until the next statement that answers, or the commit

``params`` is one mapping of values, or a list of them (the statement once per row).
The transaction scope is ``orchestrator.db.database.Database.transaction()`` (the unit of
work holds one per unit): it rolls back unless ``commit()`` is called.  ``Database.one``
runs one statement as its own transaction, outside any unit of work (the accept's
authentication and claim).  The asyncio variant (the accept on the API's event loop) is
``orchestrator.db.async_session``.

Two implementations, chosen by the database:

* **SQLite** (the embedded default), and any statement PostgreSQL cannot prepare once:
  plain SQLAlchemy ``Connection.execute``.
* **PostgreSQL** (``orchestrator.db.postgres_session``): a statement marked
  ``prepare_once`` (``orchestrator.db.compiled``: the named statements the worker and the
  accept run for every payment) is compiled once and run prepared on the connection's
  psycopg cursor, skipping SQLAlchemy's per-execution layer; the ``write`` statements left
  after a unit's last read are sent with its COMMIT in one round trip (psycopg's pipeline
  mode).  Callers never choose either.

Errors keep SQLAlchemy's form everywhere: a psycopg error is raised as SQLAlchemy's
exception (``IntegrityError``, ``OperationalError``, ...) and a lost connection
invalidates the pool, as for a statement SQLAlchemy ran itself.  Every statement fires
SQLAlchemy's ``before_cursor_execute`` event (``bench.dbcount`` counts with it).

Why SQLAlchemy Core and not SQL text: the statements are composed (one claim for two
tables, the history and provider-call riders wrap any lease UPDATE, the guards come from
the state machine's data, the same table definitions serve SQLite and PostgreSQL), and
Core compiles each once per dialect, which the prepared path builds on
(docs/decisions/0061-one-data-access-seam.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

Row = Mapping[str, Any]
Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


class Session:
    """One transaction's statements, through SQLAlchemy (SQLite's implementation, and
    the base of PostgreSQL's)."""

    # Whether a statement's own effect is stored when it returns, before any commit: a
    # PostgreSQL session in autocommit (``orchestrator.db.repositories.carried_calls``).
    stores_each_statement = False

    def __init__(self, connection: sa.Connection, *, owned: bool = True) -> None:
        self.connection = connection
        self._owned = owned
        self._transaction: sa.RootTransaction | None = connection.begin()

    @property
    def dialect(self) -> str:
        return self.connection.dialect.name

    # -- the statements ----------------------------------------------------------------------

    def one(self, statement: sa.Executable, params: Params = None) -> Row | None:
        found = self._sqlalchemy(statement, params).first()
        return None if found is None else cast(Row, found._mapping)

    def all(self, statement: sa.Executable, params: Params = None) -> list[Row]:
        return [cast(Row, row._mapping) for row in self._sqlalchemy(statement, params)]

    def scalar(self, statement: sa.Executable, params: Params = None) -> Any:
        row = self.one(statement, params)
        return None if row is None else next(iter(row.values()))

    def execute(self, statement: sa.Executable, params: Params = None) -> int:
        return int(self._sqlalchemy(statement, params).rowcount)

    def write(self, statement: sa.Executable, params: Params = None) -> None:
        self._sqlalchemy(statement, params)

    def _sqlalchemy(self, statement: sa.Executable, params: Params) -> sa.CursorResult[Any]:
        if params is None:
            return self.connection.execute(statement)
        if isinstance(params, Mapping):
            return self.connection.execute(statement, dict(params))
        return self.connection.execute(statement, [dict(row) for row in params])

    # -- the transaction -----------------------------------------------------------------------

    def commit(self) -> None:
        assert self._transaction is not None, "session used after it ended"
        self._transaction.commit()

    def rollback(self) -> None:
        assert self._transaction is not None, "session used after it ended"
        self._transaction.rollback()

    def close(self) -> None:
        """Roll back what was not committed, and give the connection back."""
        try:
            if self._transaction is not None and self._transaction.is_active:
                self._transaction.rollback()
        finally:
            self._transaction = None
            if self._owned:
                self.connection.close()
