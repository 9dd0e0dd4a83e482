"""A statement compiled once per dialect and set of parameter names, for running it on
psycopg itself (``orchestrator.db.postgres_session``, ``orchestrator.db.async_session``).

SQLAlchemy compiles it (the same SQL it would send); its values go through their columns'
bind processors (UTC timestamps, JSONB) and its rows through their result processors, as
SQLAlchemy's own execution would.  What SQLAlchemy renders or computes per execution
(expanding ``IN`` lists, Python-side column defaults) cannot be compiled once: such a
statement is marked ``prepared = False`` and the session runs it through SQLAlchemy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


class Compiled:
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
        self.prepared = not (
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
_COMPILED: dict[_Key, tuple[sa.Executable, Compiled]] = {}
_COMPILING = threading.Lock()


def compiled(statement: sa.Executable, dialect: sa.Dialect, values: Mapping[str, Any]) -> Compiled:
    """``statement`` compiled once for these values' names: its SQL, ``params(values)``
    through the bind processors, ``mapping(row)`` through the result processors."""
    keys = tuple(sorted(values))
    key = (id(statement), type(dialect), keys)
    entry = _COMPILED.get(key)
    if entry is None:
        with _COMPILING:
            entry = _COMPILED.get(key)
            if entry is None:
                entry = _COMPILED[key] = (statement, Compiled(statement, dialect, keys))
    return entry[1]


# The execution option that marks a statement built once and run many times: the
# PostgreSQL session compiles it once and runs it prepared.  A statement built per call
# (its values inline) must not carry it: the cache above keeps every statement it sees.
PREPARE_ONCE = "payorch_prepare_once"

E = TypeVar("E", bound=sa.Executable)


def prepare_once(statement: E) -> E:
    """``statement`` marked to be compiled once and run prepared on PostgreSQL (see
    ``PREPARE_ONCE``); for module-level statements and the caches that build one per
    shape.  Elsewhere (SQLite) the mark changes nothing."""
    return statement.execution_options(**{PREPARE_ONCE: True})


def is_prepared_once(statement: sa.Executable) -> bool:
    return bool(statement.get_execution_options().get(PREPARE_ONCE))
