"""Fixtures of the harness (registered as a pytest plugin by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A fresh, empty database: an SQLite file (the embedded default) or a PostgreSQL
    database of this test run."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'payorch.sqlite3'}"
    make: Callable[[], str] = request.getfixturevalue("make_postgres_database")
    return make()


@pytest.fixture(scope="session")
def make_broker_url(rabbitmq_server: None, pytestconfig: pytest.Config) -> Callable[[], str]:
    """Fresh RabbitMQ vhosts on demand (a queue per test: no message of one test reaches
    the workers of another); deleted when the session ends (``pytest_sessionfinish``)."""
    from tests.support import rabbitmq
    from tests.support.plugin import new_session_vhost

    def make() -> str:
        return rabbitmq.broker_url(new_session_vhost(pytestconfig))

    return make
