"""What counts as "the database cannot be used", and the one line said about it (decision
0090).  The exceptions are the drivers' own classes, built as the drivers raise them; the
real failures (a missing database, a closed port) are in
tests/integration/test_cli_database_trouble.py."""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg.errors
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from orchestrator.db.unreachable import (
    NOT_MIGRATED_HINT,
    POOL_HINT,
    STATEMENT_TIMEOUT_HINT,
    UNREACHABLE_HINT,
    database_trouble,
    shown_url,
)

REFUSED = (
    'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
    "\tIs the server running on that host and accepting TCP/IP connections?"
)


def _wrapped(error_class: type[Exception], driver: Exception) -> Exception:
    return error_class("SELECT 1", None, driver)  # type: ignore[call-arg]


def test_a_refused_connection_is_one_line_with_what_to_check() -> None:
    trouble = database_trouble(_wrapped(OperationalError, psycopg.OperationalError(REFUSED)))

    assert trouble is not None
    assert trouble.hint == UNREACHABLE_HINT
    assert "\n" not in trouble.cause and "\t" not in trouble.cause
    assert trouble.cause.startswith('connection failed: connection to server at "127.0.0.1"')
    assert "Is the server running" in trouble.cause
    assert "sqlalche.me" not in trouble.cause and "SELECT 1" not in trouble.cause


def test_a_database_without_tables_says_to_migrate() -> None:
    postgres = _wrapped(
        ProgrammingError, psycopg.errors.UndefinedTable('relation "payments" does not exist')
    )
    sqlite = _wrapped(OperationalError, sqlite3.OperationalError("no such table: payments"))

    for error in (postgres, sqlite):
        trouble = database_trouble(error)
        assert trouble is not None and trouble.hint == NOT_MIGRATED_HINT, error


def test_timeouts_name_their_own_setting() -> None:
    pool = database_trouble(PoolTimeoutError("QueuePool limit of size 5 overflow 0 reached"))
    statement = database_trouble(
        _wrapped(
            OperationalError,
            psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        )
    )

    assert pool is not None and pool.hint == POOL_HINT
    assert statement is not None and statement.hint == STATEMENT_TIMEOUT_HINT


def _raise_while_handling(*, hide: bool) -> None:
    try:
        raise _wrapped(OperationalError, psycopg.OperationalError(REFUSED))
    except OperationalError as error:
        if hide:
            raise LookupError("handled, said otherwise") from None
        raise RuntimeError("while reading the status") from error


def test_trouble_is_found_in_what_an_error_was_raised_from() -> None:
    with pytest.raises(RuntimeError) as raised:
        _raise_while_handling(hide=False)
    assert database_trouble(raised.value) is not None


def test_an_error_raised_from_none_hides_the_database_error_it_handled() -> None:
    with pytest.raises(LookupError) as raised:
        _raise_while_handling(hide=True)
    assert database_trouble(raised.value) is None


@pytest.mark.parametrize(
    "error",
    [
        _wrapped(IntegrityError, psycopg.errors.UniqueViolation("duplicate key")),
        ValueError("a bug"),
    ],
)
def test_other_errors_are_not_database_trouble(error: Exception) -> None:
    assert database_trouble(error) is None


def test_the_url_is_shown_without_its_password() -> None:
    shown = shown_url("postgresql+psycopg://payorch:hunter2@db:5432/payorch")

    assert shown == "postgresql+psycopg://payorch:***@db:5432/payorch"
    assert "hunter2" not in shown_url("not a url with hunter2")
