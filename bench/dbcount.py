"""Counting what a measured process asks of the database: transactions and round trips.

``install()`` (called by ``bench.worker`` before anything connects) adds
SQLAlchemy event listeners to every engine and pool the process builds.  Each process writes
its counts to ``$BENCH_DB_COUNTS/<pid>.json`` twice a second (so a prefork child that is
killed at shutdown still leaves its last counts), and the bench sums the files.

Round trips on PostgreSQL with psycopg 3, per kind of event:

    statement       one (every execute: SELECT, INSERT, UPDATE, ...)
    begin           one: psycopg sends ``BEGIN`` on its own before the first statement
                    and waits for it (in pipeline mode too: a sync)
    commit/rollback one each, none when the session is idle by then (a COMMIT sent with
                    the held writes, ``PostgresSession.send_held_with_commit``)
    (none of the last two in autocommit: a unit of one statement, its own transaction)
    deferred        none per statement sent in pipeline mode (the writes a session held
                    back to its commit, ``orchestrator.db.postgres_session``), one per
                    unit for all of them and its COMMIT
    pre-ping        one per checkout when ``pool_pre_ping`` is on (a ``SELECT 1``)

The statements are also counted by their first word, so the clock reads (``SELECT
coalesce(:now, clock_timestamp())``) stand out from the rest.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

DIRECTORY_ENV = "BENCH_DB_COUNTS"

# Counting must cost the measured worker next to nothing: it once took a lock shared by
# 128 threads, a getpid() system call and an environment lookup per count, and lower-cased
# each statement's whole text, which was ~1.3 ms of a payment's ~9.5 ms of worker CPU
# (the history of bench/RESULTS.md).  Each thread now counts into its own Counter, with no
# lock; the writer thread sums them.
_local = threading.local()
_counters: list[Counter[str]] = []  # every thread's, appended under _registering
_registering = threading.Lock()
_kinds: dict[str, str] = {}  # statement text -> its kind (the prebuilt texts repeat)
_checked_out = 0
_peak_checked_out = 0
_checkout_lock = threading.Lock()


def _counter() -> Counter[str]:
    counter: Counter[str] | None = getattr(_local, "counter", None)
    if counter is None:
        counter = _local.counter = Counter()
        with _registering:
            _counters.append(counter)
    return counter


def _bump(name: str, by: int = 1) -> None:
    _counter()[name] += by


def _statement_kind(statement: str) -> str:
    kind = _kinds.get(statement)
    if kind is None:
        text = statement.lstrip().lower()
        if text.startswith("select coalesce") and "clock_timestamp()" in text:
            kind = "statements.clock"
        else:
            word = text.split(None, 1)[0] if text else "empty"
            kind = f"statements.{word}"
        _kinds[statement] = kind
    return kind


def _snapshot() -> dict[str, int]:
    total: Counter[str] = Counter()
    with _registering:
        counters = list(_counters)
    for counter in counters:
        # dict() copies in one step under the GIL, while the counter's thread goes on.
        total.update(dict(counter))
    result = dict(total)
    result["max_checked_out"] = _peak_checked_out
    return result


def _start_writer() -> None:
    """One writer thread per process: started at install, and again in a forked child
    (a prefork child's or a threads process's own), whose counts start from zero."""
    directory = os.environ.get(DIRECTORY_ENV)
    if not directory:
        return
    target = Path(directory) / f"{os.getpid()}.json"

    def write() -> None:
        while True:
            temporary = target.with_suffix(".tmp")
            temporary.write_text(json.dumps(_snapshot()))
            temporary.replace(target)
            threading.Event().wait(0.5)

    threading.Thread(target=write, name="bench-dbcount", daemon=True).start()


def _after_fork_in_child() -> None:
    global _local, _counters, _registering, _checked_out, _peak_checked_out
    _local = threading.local()
    _counters = []
    _registering = threading.Lock()
    _checked_out = _peak_checked_out = 0
    _start_writer()


def install() -> None:
    if getattr(install, "_done", False):
        return
    install._done = True  # type: ignore[attr-defined]
    _start_writer()
    os.register_at_fork(after_in_child=_after_fork_in_child)

    @event.listens_for(sa.engine.Engine, "before_cursor_execute")
    def _statement(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        _bump("statements")
        _bump(_statement_kind(statement))
        if _autocommit(conn):
            _bump("statements.autocommit")  # a transaction of its own
        if _deferring(conn):
            _bump("statements.deferred")  # no round trip of its own, unless read (below)
        if not _autocommit(conn) and _idle(conn) is True:
            # psycopg sends BEGIN first and waits for it, in pipeline mode too (a sync).
            _bump("begin_round_trips")

    # One round trip sends a unit's held writes with its COMMIT (pipeline mode,
    # orchestrator.db.postgres_session); nothing is read in pipeline mode otherwise.
    from orchestrator.db.postgres_session import PostgresSession

    send_held_with_commit = PostgresSession.send_held_with_commit

    def _counted_send_held_with_commit(self: PostgresSession) -> None:
        _bump("deferred_syncs")
        send_held_with_commit(self)

    PostgresSession.send_held_with_commit = _counted_send_held_with_commit  # type: ignore[method-assign]

    @event.listens_for(sa.engine.Engine, "begin")
    def _begin(conn: Any) -> None:
        if not _autocommit(conn):
            _bump("begins")
            if _idle(conn) is None:  # not psycopg: its BEGIN is counted here
                _bump("begin_round_trips")

    @event.listens_for(sa.engine.Engine, "commit")
    def _commit(conn: Any) -> None:
        if not _autocommit(conn):
            _bump("commits")
            if _idle(conn) is not True:  # psycopg sends nothing for an idle session
                _bump("commit_round_trips")

    @event.listens_for(sa.engine.Engine, "rollback")
    def _rollback(conn: Any) -> None:
        if not _autocommit(conn):
            _bump("rollbacks")
            if _idle(conn) is not True:
                _bump("rollback_round_trips")

    @event.listens_for(sa.pool.Pool, "checkout")
    def _checkout(_dbapi: Any, _record: Any, proxy: Any) -> None:
        global _checked_out, _peak_checked_out
        _bump("checkouts")
        if getattr(proxy._pool, "_pre_ping", False):
            _bump("pre_pings")
        with _checkout_lock:
            _checked_out += 1
            _peak_checked_out = max(_peak_checked_out, _checked_out)

    @event.listens_for(sa.pool.Pool, "checkin")
    def _checkin(_dbapi: Any, _record: Any) -> None:
        global _checked_out
        with _checkout_lock:
            _checked_out -= 1

    @event.listens_for(sa.pool.Pool, "connect")
    def _connect(_dbapi: Any, _record: Any) -> None:
        _bump("connects")


def _autocommit(conn: Any) -> bool:
    """A unit of one statement (``UnitOfWork(single_statement=True)``) runs in autocommit:
    psycopg sends no BEGIN and no COMMIT for it, though SQLAlchemy still fires the events."""
    return bool(getattr(conn.connection.dbapi_connection, "autocommit", False))


def _idle(conn: Any) -> bool | None:
    """Whether psycopg's session is outside a transaction (None: not psycopg)."""
    pgconn = getattr(conn.connection.dbapi_connection, "pgconn", None)
    if pgconn is None:
        return None
    return bool(pgconn.transaction_status == 0)  # PQTRANS_IDLE


def _deferring(conn: Any) -> bool:
    pgconn = getattr(conn.connection.dbapi_connection, "pgconn", None)
    return bool(pgconn is not None and pgconn.pipeline_status)


def read(directory: Path) -> dict[str, int]:
    """The sum over every process that wrote counts (the peak of checked-out connections:
    the largest of any one process)."""
    total: Counter[str] = Counter()
    peak = 0
    for path in directory.glob("*.json"):
        try:
            counts = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        peak = max(peak, int(counts.pop("max_checked_out", 0)))
        total.update(counts)
    result = dict(total)
    result["max_checked_out"] = peak
    return result


def per_payment(counts: dict[str, int], payments: int) -> dict[str, float]:
    """Transactions and round trips per payment (see the module docstring)."""
    if payments <= 0:
        return {}
    transactions = counts.get("begins", 0) + counts.get("statements.autocommit", 0)
    round_trips = (
        counts.get("statements", 0)
        - counts.get("statements.deferred", 0)
        + counts.get("deferred_syncs", 0)
        + counts.get("begin_round_trips", 0)
        + counts.get("commit_round_trips", 0)
        + counts.get("rollback_round_trips", 0)
        + counts.get("pre_pings", 0)
    )
    figures = {
        "transactions": transactions / payments,
        "round_trips": round_trips / payments,
        "statements": counts.get("statements", 0) / payments,
        "clock_reads": counts.get("statements.clock", 0) / payments,
        "pre_pings": counts.get("pre_pings", 0) / payments,
    }
    return {name: round(value, 2) for name, value in figures.items()}
