"""The default worker: a pool of threads for I/O-bound provider calls, a database pool sized
from it, an operator's own sizes kept, pools that would hang refused up front; the provider
client gives every thread its own connection pool."""

from __future__ import annotations

import gc
import sys
import threading
from collections import Counter

import pytest
import urllib3
from typer.testing import CliRunner

from orchestrator.cli.main import app as cli
from orchestrator.cli.worker.pool import (
    DEFAULT_POOL,
    MAX_DB_CONNECTIONS,
    apply_connection_sizing,
    connection_sizing,
    default_concurrency,
)
from orchestrator.cli.worker.processes import default_processes, split_concurrency, usable_cpus
from orchestrator.providers.stripe_adapter import StripeProvider
from tests.fakes.stripe_http import LocalStripeServer


def test_the_default_worker_is_a_large_pool_of_threads() -> None:
    assert DEFAULT_POOL == "threads"
    # Two 300 ms provider calls per payment: 100 payments/s need 60 or more in flight.
    assert default_concurrency("threads") >= 100
    assert default_concurrency("solo") == 1


def test_many_threads_get_a_bounded_database_pool() -> None:
    sizing = connection_sizing("threads", 128)

    assert sizing.db_pool_size == MAX_DB_CONNECTIONS
    assert sizing.db_max_overflow == 0
    # Never more than a third of PostgreSQL's default max_connections (100) per worker.
    assert MAX_DB_CONNECTIONS <= 33


def test_the_default_worker_runs_a_threads_process_per_usable_cpu_on_linux() -> None:
    expected = usable_cpus() if sys.platform.startswith("linux") else 1
    assert default_processes("threads") == expected
    assert default_processes("prefork") == default_processes("solo") == 1


def test_the_threads_are_shared_evenly_among_the_processes() -> None:
    assert split_concurrency(128, 2) == (64, 64)
    assert split_concurrency(5, 2) == (3, 2)
    assert split_concurrency(7, 1) == (7,)
    # Never a process without a thread.
    assert split_concurrency(2, 4) == (1, 1)
    with pytest.raises(ValueError, match="at least 1"):
        split_concurrency(0, 2)


def test_several_processes_share_one_workers_connection_budget() -> None:
    one = connection_sizing("threads", 128, processes=1)
    two = connection_sizing("threads", 64, processes=2)
    four = connection_sizing("threads", 32, processes=4)

    assert one.db_pool_size == MAX_DB_CONNECTIONS
    assert 2 * two.db_pool_size <= MAX_DB_CONNECTIONS
    assert 4 * four.db_pool_size <= MAX_DB_CONNECTIONS
    # A process keeps enough for a task and the spares however many there are.
    assert connection_sizing("threads", 8, processes=64).db_pool_size >= 3


def test_a_few_threads_get_a_connection_each_plus_spares() -> None:
    sizing = connection_sizing("threads", 4)

    assert 4 < sizing.db_pool_size < MAX_DB_CONNECTIONS


def test_a_prefork_child_runs_one_task_and_needs_few_connections() -> None:
    sizing = connection_sizing("prefork", 8)

    assert sizing.db_pool_size <= 3


def test_the_sizing_never_overrides_what_the_operator_set() -> None:
    environ = {"PAYORCH_DB_POOL_SIZE": "7"}

    applied = apply_connection_sizing(connection_sizing("threads", 64), environ)

    assert environ["PAYORCH_DB_POOL_SIZE"] == "7"
    assert "PAYORCH_DB_POOL_SIZE" not in applied
    assert environ["PAYORCH_DB_MAX_OVERFLOW"] == applied["PAYORCH_DB_MAX_OVERFLOW"] == "0"


_INTENT = {
    "id": "pi_1",
    "object": "payment_intent",
    "amount": 1000,
    "currency": "usd",
    "status": "succeeded",
    "metadata": {},
    "created": 1_700_000_000,
}


def test_every_thread_calls_the_provider_through_its_own_connection() -> None:
    with LocalStripeServer(_INTENT) as server:
        provider = StripeProvider(
            api_key="sk_test_unit", api_base=server.url, connect_timeout=1.0, read_timeout=5.0
        )
        pools = provider._http_client._pools  # type: ignore[attr-defined]
        managers: list[object] = []

        def in_a_thread() -> None:
            provider.retrieve_payment("pi_1")
            provider.retrieve_payment("pi_1")
            managers.append(pools._holder().direct_manager)

        threads = [threading.Thread(target=in_a_thread) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        provider.close()

    # Three connections, each kept alive for its thread's second call.
    assert len(server.client_ports) == 6
    assert sorted(Counter(server.client_ports).values()) == [2, 2, 2]
    # One SSL context for all of them: the CA bundle is loaded once.
    contexts = {id(m.connection_pool_kw["ssl_context"]) for m in managers}  # type: ignore[attr-defined]
    assert len(managers) == 3 and len(contexts) == 1


def test_a_threads_connections_are_closed_when_its_thread_ends_and_the_rest_at_close() -> None:
    # A pool dropped unclosed leaks its socket (a ResourceWarning under -W error failed the
    # demo's test): each thread's pools are closed when the thread ends, and close() closes
    # the ones still alive.
    with LocalStripeServer(_INTENT) as server:
        provider = StripeProvider(
            api_key="sk_test_unit", api_base=server.url, connect_timeout=1.0, read_timeout=5.0
        )
        pools = provider._http_client._pools  # type: ignore[attr-defined]
        ended: list[urllib3.PoolManager] = []

        def in_a_thread() -> None:
            provider.retrieve_payment("pi_1")
            ended.append(pools._holder().direct_manager)

        thread = threading.Thread(target=in_a_thread)
        thread.start()
        thread.join()
        del thread
        gc.collect()
        assert len(ended[0].pools) == 0  # its thread ended: cleared

        provider.retrieve_payment("pi_1")
        mine = pools._holder().direct_manager
        assert len(mine.pools) == 1
        provider.close()
        assert len(mine.pools) == 0


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_a_pool_that_would_hang_is_refused_with_the_reason(pool: str) -> None:
    result = CliRunner().invoke(cli, ["worker", "--pool", pool], env={"COLUMNS": "200"})

    assert result.exit_code == 2
    assert "not supported" in result.output
    assert "monkey-patched" in result.output
    assert "--pool threads" in result.output


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_several_processes_are_refused_for_pools_that_are_not_threads(pool: str) -> None:
    result = CliRunner().invoke(
        cli, ["worker", "--pool", pool, "--processes", "2"], env={"COLUMNS": "200"}
    )

    assert result.exit_code == 2
    assert "--processes applies to the threads pool" in result.output
    assert "--concurrency" in result.output


def test_an_unknown_pool_is_refused_naming_the_choices() -> None:
    result = CliRunner().invoke(cli, ["worker", "--pool", "fibers"], env={"COLUMNS": "200"})

    assert result.exit_code == 2
    assert "threads, prefork, solo" in result.output
