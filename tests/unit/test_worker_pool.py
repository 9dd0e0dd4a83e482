"""The default worker: a pool of threads for I/O-bound provider calls, connection pools
sized from it, an operator's own sizes kept, and pools that would hang refused up front."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app as cli
from orchestrator.cli.worker_pool import (
    DEFAULT_POOL,
    MAX_DB_CONNECTIONS,
    apply_connection_sizing,
    connection_sizing,
    default_concurrency,
)
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.settings import Settings


def test_the_default_worker_is_a_large_pool_of_threads() -> None:
    assert DEFAULT_POOL == "threads"
    # Two 300 ms provider calls per payment: 100 payments/s need 60 or more in flight.
    assert default_concurrency("threads") >= 100
    assert default_concurrency("solo") == 1


def test_threads_get_one_provider_connection_each_and_a_bounded_database_pool() -> None:
    sizing = connection_sizing("threads", 128)

    assert sizing.provider_max_connections == 128
    assert sizing.db_pool_size == MAX_DB_CONNECTIONS
    assert sizing.db_max_overflow == 0
    # Never more than a third of PostgreSQL's default max_connections (100) per worker.
    assert MAX_DB_CONNECTIONS <= 33


def test_a_few_threads_get_a_connection_each_plus_spares() -> None:
    sizing = connection_sizing("threads", 4)

    assert sizing.provider_max_connections == 4
    assert 4 < sizing.db_pool_size < MAX_DB_CONNECTIONS


def test_a_prefork_child_runs_one_task_and_needs_few_connections() -> None:
    sizing = connection_sizing("prefork", 8)

    assert sizing.provider_max_connections == 1
    assert sizing.db_pool_size <= 3


def test_the_sizing_never_overrides_what_the_operator_set() -> None:
    environ = {"PAYORCH_DB_POOL_SIZE": "7"}

    applied = apply_connection_sizing(connection_sizing("threads", 64), environ)

    assert environ["PAYORCH_DB_POOL_SIZE"] == "7"
    assert "PAYORCH_DB_POOL_SIZE" not in applied
    assert environ["PAYORCH_PROVIDER_MAX_CONNECTIONS"] == "64"
    assert applied["PAYORCH_PROVIDER_MAX_CONNECTIONS"] == "64"


def test_the_provider_client_keeps_as_many_connections_as_configured() -> None:
    settings = Settings(_env_file=None, provider_max_connections=64)  # type: ignore[call-arg]

    provider = StripeProvider.from_settings(settings)

    pool = provider._http_client._http._transport._pool  # type: ignore[attr-defined]
    assert pool._max_connections == 64
    assert pool._max_keepalive_connections == 64


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_a_pool_that_would_hang_is_refused_with_the_reason(pool: str) -> None:
    result = CliRunner().invoke(cli, ["worker", "--pool", pool], env={"COLUMNS": "200"})

    assert result.exit_code == 2
    assert "not supported" in result.output
    assert "monkey-patched" in result.output
    assert "--pool threads" in result.output


def test_an_unknown_pool_is_refused_naming_the_choices() -> None:
    result = CliRunner().invoke(cli, ["worker", "--pool", "fibers"], env={"COLUMNS": "200"})

    assert result.exit_code == 2
    assert "threads, prefork, solo" in result.output
