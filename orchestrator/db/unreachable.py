"""A database that cannot be used, said in one line (decision 0090).

The driver's own words are the cause ("database "x" does not exist", "Connection refused",
"password authentication failed"); wrapped by SQLAlchemy they come with a class path, the
statement, parameters and a link, and a traceback around them is 140 lines that bury the
one that matters.  ``database_trouble`` turns an exception into the cause and what to check;
the CLI's error boundary, the API's start and its 503 log line all say it the same way.

What counts, walking the exception and its causes::

    sqlalchemy.exc.OperationalError   cannot connect, connection lost, server shutting down;
                                      SQLite: cannot open the file
    psycopg's QueryCanceled           a statement timeout (its own hint)
    sqlalchemy.exc.TimeoutError       no pooled connection free in time
    psycopg.OperationalError          the same, from psycopg used directly (LISTEN, the
                                      API's event-loop claim)
    "no such table" / undefined_table the database exists but was never migrated

Anything else (a constraint violated, a bug) is not database trouble: it keeps its traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
import psycopg.errors
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

UNREACHABLE_HINT = (
    "check PAYORCH_DATABASE_URL, that the database server is running and reachable from "
    "here, and that the database exists"
)
NOT_MIGRATED_HINT = "the database has no payorch tables: run 'payorch db upgrade'"
STATEMENT_TIMEOUT_HINT = (
    "a statement ran past PAYORCH_DB_STATEMENT_TIMEOUT_MS: look for locks held long or "
    "slow statements"
)
POOL_HINT = (
    "every pooled connection stayed busy: look for slow statements, or raise "
    "PAYORCH_DB_POOL_SIZE within the server's max_connections"
)
# A cause longer than this is cut: the point is one readable line.
_MAX_CAUSE = 300
# How deep to look through __cause__ / __context__ (a wrapper of a wrapper).
_MAX_DEPTH = 5
_UNDEFINED_TABLE = "42P01"
_BACKGROUND = re.compile(r"\s*\(Background on this error at: [^)]*\)")


@dataclass(frozen=True)
class DatabaseTrouble:
    cause: str  # the driver's words, one line
    hint: str  # what to check

    def line(self, url: str | None) -> str:
        where = f"the database at {shown_url(url)}" if url else "the database"
        return f"cannot use {where}: {self.cause}; {self.hint}"


def database_trouble(exc: BaseException) -> DatabaseTrouble | None:
    """The cause and what to check when ``exc`` (or what caused it) says the database
    cannot be used; None for any other error."""
    seen: BaseException | None = exc
    for _ in range(_MAX_DEPTH):
        if seen is None:
            return None
        found = _classify(seen)
        if found is not None:
            return found
        # What it was raised from; or, unless that was hidden ("from None"), what it was
        # raised while handling.
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def probe(engine: Engine) -> DatabaseTrouble | None:
    """Connect and look for the payments table: what a server needs before it says it is
    listening.  None: usable."""
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("payments"):
                return DatabaseTrouble("there is no table 'payments'", NOT_MIGRATED_HINT)
    except (DBAPIError, PoolTimeoutError) as exc:
        trouble = database_trouble(exc)
        if trouble is None:
            raise
        return trouble
    return None


def shown_url(url: str) -> str:
    """The URL with its password replaced by ``***``: logs and terminals are read by more
    people than the database's password is meant for."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(PAYORCH_DATABASE_URL: not a database URL)"


def one_line(text: str) -> str:
    """The driver's message with SQLAlchemy's link removed and its lines joined."""
    flat = " ".join(_BACKGROUND.sub("", text).split())
    return flat if len(flat) <= _MAX_CAUSE else flat[: _MAX_CAUSE - 1] + "…"


def _classify(exc: BaseException) -> DatabaseTrouble | None:
    driver: BaseException = exc
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        driver = exc.orig
    if _is_missing_table(driver):
        return DatabaseTrouble(one_line(str(driver)), NOT_MIGRATED_HINT)
    if isinstance(exc, PoolTimeoutError):
        return DatabaseTrouble(one_line(str(exc)), POOL_HINT)
    if isinstance(driver, psycopg.errors.QueryCanceled):
        return DatabaseTrouble(one_line(str(driver)), STATEMENT_TIMEOUT_HINT)
    if isinstance(exc, OperationalError | psycopg.OperationalError):
        return DatabaseTrouble(one_line(str(driver)), UNREACHABLE_HINT)
    return None


def _is_missing_table(driver: BaseException) -> bool:
    if isinstance(driver, psycopg.Error):
        return driver.sqlstate == _UNDEFINED_TABLE
    # SQLite says it only in words: its error code is the generic SQLITE_ERROR.
    return type(driver).__name__ == "OperationalError" and str(driver).startswith("no such table")
