"""The caches of prebuilt statements are filled once per process even when every thread of
a fresh worker asks for the same statement at the same moment (they used to build and
compile one copy each)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.ext.compiler import compiles

from orchestrator.db import compiled as compiled_statements
from orchestrator.db.repositories import lease_statements
from orchestrator.db.repositories.leases import LeaseRepository
from orchestrator.db.tables import payments

THREADS = 16


def all_at_once(call: Callable[[], Any]) -> list[Any]:
    """``call()`` in THREADS threads released together; what each returned."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = []

    def run() -> None:
        barrier.wait()
        results.append(call())

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == THREADS
    return results


class SlowToBuild(LeaseRepository):
    """Counts the builds of ``lease_statements.with_history`` and makes each last long
    enough that every racing thread would be inside one."""

    builds = 0

    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        type(self).builds += 1
        time.sleep(0.01)
        return super()._history_id_columns(updated)


def repository() -> SlowToBuild:
    # Building and caching statements never touches the connection.
    return SlowToBuild(sa.create_engine("sqlite://").connect())


class SlowToCompile(sa.sql.expression.ColumnElement[int]):
    """A column whose compilation takes a while (so racing threads overlap in it)."""

    inherit_cache = True
    type = sa.Integer()


@compiles(SlowToCompile)
def _compile_slowly(_element: SlowToCompile, _compiler: Any, **_kw: Any) -> str:
    time.sleep(0.01)
    return "1"


def test_a_prebuilt_update_is_built_once_by_threads_asking_together() -> None:
    builds: list[int] = []
    name = f"test-{uuid.uuid4()}"

    def build() -> sa.Update:
        builds.append(1)
        time.sleep(0.01)  # long enough that every racing thread would be inside it
        return lease_statements.fenced_update(
            payments, payments.c.id == sa.bindparam("p_id"), {"last_error": sa.bindparam("p_error")}
        )

    statements = all_at_once(lambda: lease_statements.prebuilt_update(payments, name, build))

    assert len(builds) == 1
    assert len({id(statement) for statement in statements}) == 1


def test_the_statement_with_its_history_is_built_once() -> None:
    leases = repository()
    update = (
        payments.update()
        .where(payments.c.id == sa.bindparam("p_id"))
        .values(last_error=sa.bindparam("p_error"))
        .returning(*payments.c)
    )

    before = SlowToBuild.builds
    built = all_at_once(lambda: lease_statements.with_history(update, leases._history_id_columns))

    assert SlowToBuild.builds - before == 1
    assert len({id(statement) for statement in built}) == 1


def test_a_statement_is_compiled_once_by_threads_asking_together() -> None:
    statement = sa.select(payments.c.id, SlowToCompile().label("slow")).where(
        payments.c.id == sa.bindparam("p_id")
    )
    dialect = pg_psycopg.dialect()

    compiled = all_at_once(lambda: compiled_statements.compiled(statement, dialect, {"p_id": "x"}))

    assert len({id(entry) for entry in compiled}) == 1
