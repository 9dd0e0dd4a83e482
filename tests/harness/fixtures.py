"""Fixtures of the harness (registered as a pytest plugin by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh, empty database: an SQLite file (the embedded default) or a PostgreSQL
    database of this test run."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'payorch.sqlite3'}"
    make: Callable[[], str] = request.getfixturevalue("make_postgres_database")
    return make()
