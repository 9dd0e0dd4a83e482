"""Fixtures of the harness (registered as a pytest plugin by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

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
def make_broker_url(rabbitmq_server: None) -> Iterator[Callable[[], str]]:
    """Fresh RabbitMQ vhosts on demand (a queue per test: no message of one test reaches
    the workers of another); deleted when the session ends."""
    from tests.support import rabbitmq

    made: list[str] = []

    def make() -> str:
        vhost = rabbitmq.create_vhost()
        made.append(vhost)
        return rabbitmq.broker_url(vhost)

    yield make
    for vhost in made:
        try:
            rabbitmq.delete_vhost(vhost)
        except Exception as error:  # a leftover vhost is reaped by the next run
            print(f"could not delete vhost {vhost}: {error}")
