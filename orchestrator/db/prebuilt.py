"""Prebuilt statements, executed on psycopg itself on PostgreSQL.

The worker's every step runs the same dozen statements, each built once with bound
parameters (``lease_statements``, the history and outcome inserts).  Through
SQLAlchemy's execution layer each execution still paid for an execution context, the
result's setup, and psycopg's column descriptions (SQLAlchemy reads ``cursor.description``
of every result: 55 ``Column`` objects for each ``UPDATE payments … RETURNING``), a large
share of a payment's CPU that this way avoids (the benchmark, ``payorch bench`` and
docs/performance.md, measures this).  Here a statement is compiled
once per dialect by SQLAlchemy (the same SQL it would send), its values go through their
columns' bind processors (UTC timestamps, JSONB) and its rows through their result
processors, and it runs on the unit of work's own psycopg connection as a prepared
statement: same transaction, same pool checkout.

What stays SQLAlchemy's:

* the connection, the transaction (begin, commit, rollback) and the pool;
* the error handling: a psycopg error goes through ``Connection._handle_dbapi_exception``,
  so it is raised as SQLAlchemy's exception (``IntegrityError``, ``OperationalError``, …)
  and a lost connection invalidates the pool exactly as a statement SQLAlchemy ran would
  (the partition and restart tests rely on that);
* the ``before_cursor_execute`` event, fired for every statement (``bench.dbcount``
  counts the round trips with it);
* SQLite (the embedded default): there every call is plain ``Connection.execute``.

A statement with an expanding ``IN`` parameter (rendered only at execution time) also runs
through SQLAlchemy; the hot statements use ``=``/``OR`` instead.

Deferred answers (``defer_answers``): a transaction's last statements, the ones run for
their effect only (a finish's outcome, ledger, outbox and provider-call rows), are sent in
psycopg's pipeline mode: no wait for each answer, one round trip for all of them and the
COMMIT when the unit of work commits.  A failed one is raised then, as SQLAlchemy's
exception, and the transaction rolls back as before.  Only a unit's last statements:
psycopg's pipeline mode spends more system calls per statement whose answer is read
(polls for writing and reading, a flush each) than it saves, so a unit that deferred from
its start cost a payment more calls in all.  Hazard: a statement
SQLAlchemy itself runs in pipeline mode would find no result description (psycopg fills
it in only at the next sync) and read as returning no rows, so
``refuse_statements_while_deferred`` makes that an error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NoReturn, cast

import psycopg
import sqlalchemy as sa
from psycopg import pq
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


class _Compiled:
    """One statement compiled for one dialect: its SQL, its literal values, its bind and
    result processors."""

    def __init__(
        self, statement: sa.Executable, dialect: sa.Dialect, keys: tuple[str, ...]
    ) -> None:
        assert isinstance(statement, sa.ClauseElement)
        # The values' names, as Connection.execute compiles: an INSERT with no .values()
        # takes its columns from them.
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        # Rendered or computed per execution by SQLAlchemy: expanding IN lists, and
        # Python-side column defaults (none of the prebuilt tables has one).
        self.direct = not (
            compiled.post_compile_params
            or compiled.literal_execute_params
            or compiled.insert_prefetch
            or compiled.update_prefetch
        )
        self.fixed: dict[str, Any] = {}
        self.processors: dict[str, Processor] = {}
        for bind, name in compiled.bind_names.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if not bind.required:  # a value of the statement itself (a literal, a None)
                value = bind.effective_value
                self.fixed[name] = value if process is None else process(value)
            else:
                self.processors[name] = process
        columns = list(getattr(statement, "exported_columns", ()))
        self.names = [column.name for column in columns]
        self.results: list[Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ]

    def params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        params = dict(self.fixed)
        for name, process in self.processors.items():
            value = values[name]  # a KeyError here: a statement's parameter not given
            params[name] = value if process is None else process(value)
        return params

    def mapping(self, row: Sequence[Any]) -> dict[str, Any]:
        return {
            name: value if process is None else process(value)
            for name, value, process in zip(self.names, row, self.results, strict=True)
        }


# Keyed by the statement's identity, the dialect's class and the values' names; each value
# keeps its statement alive, so an id is never reused while its entry exists.  Filled
# under a lock: a worker starts with all its threads running the same statements at once,
# and each compiled its own copy (reads take no lock).
_Key = tuple[int, type[sa.Dialect], tuple[str, ...]]
_COMPILED: dict[_Key, tuple[sa.Executable, _Compiled]] = {}
_COMPILING = threading.Lock()


def _compiled(
    statement: sa.Executable, dialect: sa.Dialect, values: Mapping[str, Any]
) -> _Compiled:
    keys = tuple(sorted(values))
    key = (id(statement), type(dialect), keys)
    entry = _COMPILED.get(key)
    if entry is None:
        with _COMPILING:
            entry = _COMPILED.get(key)
            if entry is None:
                entry = _COMPILED[key] = (statement, _Compiled(statement, dialect, keys))
    return entry[1]


def compiled_statement(
    statement: sa.Executable, dialect: sa.Dialect, values: Mapping[str, Any]
) -> _Compiled:
    """The statement compiled once for these values' names: its SQL, ``params(values)``
    through the bind processors, ``mapping(row)`` through the result processors (for
    statements run on a raw pooled connection, orchestrator.db.direct)."""
    return _compiled(statement, dialect, values)


def is_direct(connection: sa.Connection) -> bool:
    """Whether statements here run on psycopg itself (PostgreSQL through psycopg)."""
    return connection.dialect.name == "postgresql" and connection.dialect.driver == "psycopg"


def _driver(connection: sa.Connection) -> psycopg.Connection[Any]:
    return connection.connection.driver_connection  # type: ignore[return-value]


def _raise(connection: sa.Connection, error: psycopg.Error, sql: str, params: Any) -> NoReturn:
    # SQLAlchemy's own handling: the exception it would raise, and on a lost connection
    # the pool invalidated.  (A private method, pinned by the tests that cut the database
    # off mid-statement: tests/integration/test_prebuilt_statements.py.)
    connection._handle_dbapi_exception(error, sql, params, None, None)


def _run(
    connection: sa.Connection, compiled: _Compiled, values: Mapping[str, Any]
) -> psycopg.Cursor[Any]:
    params = compiled.params(values)
    connection.dispatch.before_cursor_execute(connection, None, compiled.sql, params, None, False)
    try:
        return _driver(connection).execute(compiled.sql, params, prepare=True)
    except psycopg.Error as error:
        _raise(connection, error, compiled.sql, params)


def first(
    connection: sa.Connection, statement: sa.Executable, values: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The first row of ``statement`` (its columns by name), or None."""
    if is_direct(connection):
        compiled = _compiled(statement, connection.dialect, values)
        if compiled.direct:
            cursor = _run(connection, compiled, values)
            try:
                # In pipeline mode the answer (or an earlier deferred statement's error)
                # arrives here, not at execute.
                row = cursor.fetchone()
            except psycopg.Error as error:
                _raise(connection, error, compiled.sql, values)
            return None if row is None else compiled.mapping(row)
    found = connection.execute(statement, dict(values)).first()
    return None if found is None else cast(Mapping[str, Any], found._mapping)


def scalar(connection: sa.Connection, statement: sa.Executable, values: Mapping[str, Any]) -> Any:
    """The one value of the one row ``statement`` returns."""
    row = first(connection, statement, values)
    assert row is not None, "a scalar statement returned no row"
    return next(iter(row.values()))


def execute(connection: sa.Connection, statement: sa.Executable, values: Mapping[str, Any]) -> None:
    """Run ``statement`` for its effect (an INSERT, a row lock)."""
    if is_direct(connection):
        compiled = _compiled(statement, connection.dialect, values)
        if compiled.direct:
            _run(connection, compiled, values)
            return
    connection.execute(statement, dict(values))


def execute_many(
    connection: sa.Connection, statement: sa.Executable, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Run ``statement`` once per row of values (every row with the same names): one round
    trip on psycopg, which pipelines them."""
    if not rows:
        return
    if is_direct(connection):
        compiled = _compiled(statement, connection.dialect, rows[0])
        if compiled.direct:
            params = [compiled.params(row) for row in rows]
            connection.dispatch.before_cursor_execute(
                connection, None, compiled.sql, params, None, True
            )
            try:
                with _driver(connection).cursor() as cursor:
                    cursor.executemany(compiled.sql, params)
            except psycopg.Error as error:
                _raise(connection, error, compiled.sql, params)
            return
    connection.execute(statement, [dict(row) for row in rows])


# -- deferred answers ------------------------------------------------------------------------

DeferredAnswers = AbstractContextManager[Any]


def defer_answers(connection: sa.Connection) -> DeferredAnswers | None:
    """Enter psycopg's pipeline mode on ``connection`` (see the module docstring); None on
    SQLite, or when the connection defers already.  The caller ends it with
    ``end_deferred`` before its commit."""
    if not is_direct(connection):
        return None
    driver = _driver(connection)
    if driver.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        return None
    pipeline = driver.pipeline()
    pipeline.__enter__()
    return pipeline


def end_deferred(
    connection: sa.Connection,
    deferred: DeferredAnswers,
    error: BaseException | None,
    *,
    commit: bool = False,
) -> None:
    """Leave pipeline mode: one round trip that collects every deferred answer.  A
    deferred statement's failure is raised here as SQLAlchemy's exception, unless the unit
    is already failing with ``error`` (then it is only logged by psycopg).

    ``commit``: the transaction's COMMIT is sent behind the deferred statements, in the
    same round trip (a failed statement before it makes the server skip it: nothing is
    committed, and the failure is raised).  SQLAlchemy's commit that follows finds the
    session idle, and psycopg sends nothing more."""
    first: psycopg.Error | None = None
    if commit and error is None:
        driver = _driver(connection)
        # In autocommit each statement committed on its own: nothing to send.
        if not driver.autocommit and driver.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            try:
                driver.execute("COMMIT", prepare=False)
            except psycopg.Error as failure:
                # A deferred statement's answer that arrived while the COMMIT was sent.
                # Hazard: the pipeline must still be left, or the rollback that follows
                # meets the COMMIT's skipped answer and fails in its place.
                first = failure
    failing = error if error is not None else first
    try:
        deferred.__exit__(type(failing) if failing else None, failing, None)
    except psycopg.Error as failure:
        first = first or failure
    if first is not None and error is None:
        _raise(connection, first, "(deferred statements)", None)


def refuse_statements_while_deferred(connection: sa.Connection, cursor: Any, *_args: Any) -> None:
    """``before_cursor_execute`` on PostgreSQL: a statement SQLAlchemy runs itself (it has a
    cursor; the prebuilt ones pass None) must never run in pipeline mode."""
    if cursor is None or not is_direct(connection):
        return
    if _driver(connection).pgconn.pipeline_status != pq.PipelineStatus.OFF:
        raise RuntimeError(
            "a SQLAlchemy statement while the unit of work defers answers "
            "(orchestrator.db.prebuilt.defer_answers): run it before deferring"
        )
