"""Engine construction for PostgreSQL (production) and SQLite (the embedded default)."""

from __future__ import annotations

import select
from typing import Any

import psycopg
import psycopg._queries as psycopg_queries
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from orchestrator.settings import Settings

# Execution option marking a unit of work that only reads (see _sqlite_engine's "begin").
READ_ONLY_OPTION = "payorch_read_only"

# psycopg converts a statement's placeholders once per distinct text and caches the result,
# but only for texts up to MAX_CACHED_STATEMENT_LENGTH (4,096 bytes); a longer one is
# converted again on every execution.  The lease statements name every payment column twice
# (``RETURNING`` and the outer ``SELECT`` of their ``WITH``), and with the columns routing,
# 3-D Secure forwarding and circuits added the claim passed that limit: converted anew on
# every claim, CPU every worker pays.  The cache keeps at most 128 texts, so a higher limit
# costs at most a few MB.  tests/integration/test_worker_protocol_service.py fails if a
# statement of a payment is converted more than once (or if psycopg drops this setting).
STATEMENT_CACHE_TEXT_LIMIT = 16_384
if getattr(psycopg_queries, "MAX_CACHED_STATEMENT_LENGTH", 0) < STATEMENT_CACHE_TEXT_LIMIT:
    psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = STATEMENT_CACHE_TEXT_LIMIT


def create_engine(settings: Settings) -> Engine:
    if settings.is_sqlite:
        return _sqlite_engine(settings.database_url)
    return _postgres_engine(settings)


# Connections older than this are replaced at checkout: a firewall or load balancer that
# silently drops idle connections after some time would otherwise leave dead ones in the
# pool, which the checkout check below cannot see (no FIN ever arrives).
POOL_RECYCLE_SECONDS = 1800


def _postgres_engine(settings: Settings) -> Engine:
    engine = sa.create_engine(settings.database_url, **postgres_options(settings))
    event.listen(engine, "checkout", refuse_dead_connection)
    return engine


def postgres_options(settings: Settings) -> dict[str, Any]:
    """``create_engine`` keyword arguments for PostgreSQL (the bench's asyncio engine uses
    them too)."""
    return dict(
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_seconds,
        # No pre-ping: a ``SELECT 1`` round trip on every checkout was 8 of a payment's 45
        # round trips.  A restarted database leaves dead connections in the pool; the
        # checkout check below finds them without a round trip, and a connection that dies
        # mid-statement invalidates the whole pool (SQLAlchemy's disconnect handling), so
        # one failed statement at most, answered as retryable (503 / the sweeper).
        pool_pre_ping=False,
        pool_recycle=POOL_RECYCLE_SECONDS,
        # Errors (and so tracebacks in logs) must not carry bound parameters: they hold
        # idempotency keys, stored responses and API key hashes.
        hide_parameters=True,
        connect_args={
            # Without a connect timeout an unreachable host blocks an API thread for the
            # kernel's TCP timeout (minutes) instead of answering 503.
            "connect_timeout": 3,
            "options": (
                f"-c statement_timeout={settings.db_statement_timeout_ms} "
                f"-c idle_in_transaction_session_timeout={_idle_in_transaction_ms(settings)}"
            ),
            "application_name": "payorch",
        },
    )


def refuse_dead_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A pooled connection is idle: the server has nothing to say to it.  If its socket is
    readable anyway, the server closed it (a restart or an administrator's terminate sends
    a FATAL message and a FIN), or the connection is closed already: SQLAlchemy then
    discards it and checks out another (or connects anew).  A ``select`` with no timeout
    is a system call, not a round trip.  (An async engine hands over an adapter; its
    ``driver_connection`` is psycopg's connection.)"""
    dbapi_connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    dead = why_dead(dbapi_connection)
    if dead is not None:
        raise sa.exc.DisconnectionError(dead)


def why_dead(connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str | None:
    """Why an idle psycopg connection cannot be used (``refuse_dead_connection``'s check,
    also the API's asyncio connections'), or None."""
    if connection.closed:
        return "connection closed"
    try:
        fd = connection.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.Error) as error:  # a socket already gone
        return str(error)
    return "the server closed the connection" if readable else None


def _idle_in_transaction_ms(settings: Settings) -> int:
    """A process frozen inside one of its short transactions (SIGSTOP, a VM pause) keeps its
    row locks, and the sweeper's SKIP LOCKED would skip that record until it woke up.  The
    server ends such sessions well within a lease, so the takeover happens on time; a
    healthy transaction here lasts milliseconds."""
    return max(1000, int(settings.lease_seconds * 1000 / 3))


def _sqlite_engine(url: str) -> Engine:
    engine = sa.create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        hide_parameters=True,  # as for PostgreSQL: no keys in error messages
        pool_size=8,
        max_overflow=8,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to SQLAlchemy's "begin" hook below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # A deferred transaction that reads and then writes can fail with SQLITE_BUSY without
        # waiting (SQLite's deadlock avoidance).  Taking the write lock up front makes every
        # writer queue on busy_timeout instead: SQLite has one writer at a time anyway.
        # Units of work that only read (auth, GETs) need no lock at all under WAL.
        if connection.get_execution_options().get(READ_ONLY_OPTION):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
