"""Engine construction for PostgreSQL (production) and SQLite (the embedded default)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from orchestrator.settings import Settings

# Execution option marking a unit of work that only reads (see _sqlite_engine's "begin").
READ_ONLY_OPTION = "payorch_read_only"


def create_engine(settings: Settings) -> Engine:
    if settings.is_sqlite:
        return _sqlite_engine(settings.database_url)
    return _postgres_engine(settings)


def _postgres_engine(settings: Settings) -> Engine:
    return sa.create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_seconds,
        # A restarted database leaves dead connections in the pool; pre-ping replaces them
        # instead of failing the first request that draws one.
        pool_pre_ping=True,
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
