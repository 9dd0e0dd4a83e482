"""How a process refreshes its view of a circuit, and reads a connector account, on the real
PostgreSQL (decision 0091).

Every provider call asks the gate first, so the refresh is on the hot path: when the view
expires, one thread reads the row while the others go on with the view it replaces, and
the read runs in autocommit.  A read inside a transaction ended in a ROLLBACK, on which
psycopg deallocates every statement it prepared on that pooled connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event

from orchestrator.bootstrap import Container
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY, CircuitPolicy
from orchestrator.engine.circuits import CACHE_SECONDS, CircuitGate
from orchestrator.providers.base import Permanent
from tests.harness.containers import build_container

POLICY = CircuitPolicy(failures=3, window_seconds=30.0, open_seconds=15.0, probes=1)
BOUND = 30.0  # seconds: generous bounds for the other thread, never a timing goal


@pytest.fixture
def container(make_postgres_database: Callable[[], str]) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    yield built
    built.close()


class SteppedClock:
    """The gate's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_thread_reads_an_expired_view_while_the_others_keep_the_old_one(
    container: Container,
) -> None:
    reads: list[int] = []
    reading = threading.Event()
    finish_read = threading.Event()

    def read_uow() -> UnitOfWork:
        reads.append(1)
        if len(reads) == 2:  # the refresh after the expiry: held open until released
            reading.set()
            finish_read.wait(BOUND)
        return container.lookup_uow()

    monotonic = SteppedClock()
    gate = CircuitGate(
        PLATFORM_CIRCUIT_KEY, container.uow, POLICY, monotonic=monotonic, read_uow=read_uow
    )
    assert gate.admit() is False  # the first view: one read
    assert len(reads) == 1

    monotonic.now = CACHE_SECONDS + 0.5  # the view expired
    refresher = threading.Thread(target=gate.admit)
    refresher.start()
    try:
        assert reading.wait(BOUND)
        # Meanwhile every other call goes on the view being replaced, with no read.
        for _ in range(5):
            assert gate.admit() is False
        assert len(reads) == 2
    finally:
        finish_read.set()
        refresher.join(BOUND)
    assert not refresher.is_alive()

    monotonic.now += CACHE_SECONDS / 2  # the refreshed view is fresh
    assert gate.admit() is False
    assert len(reads) == 2


def test_a_failed_refresh_admits_the_call_and_the_next_call_reads_again(
    container: Container,
) -> None:
    reads: list[int] = []
    failing = [False]

    def read_uow() -> UnitOfWork:
        reads.append(1)
        if failing[0]:
            raise RuntimeError("database unreachable")
        return container.lookup_uow()

    monotonic = SteppedClock()
    gate = CircuitGate(
        PLATFORM_CIRCUIT_KEY, container.uow, POLICY, monotonic=monotonic, read_uow=read_uow
    )
    assert gate.admit() is False
    monotonic.now = CACHE_SECONDS + 0.5
    failing[0] = True
    assert gate.admit() is False  # unreadable: the call is admitted
    failing[0] = False
    assert gate.admit() is False  # no refresh left marked in flight: this one reads
    assert len(reads) == 3


def test_the_containers_gates_read_the_circuit_in_autocommit(container: Container) -> None:
    """No BEGIN, no ROLLBACK: the pooled connection keeps its prepared statements."""
    autocommit: list[bool] = []

    def on_execute(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM circuits" in statement:
            autocommit.append(bool(cursor.connection.autocommit))

    event.listen(container.engine, "before_cursor_execute", on_execute)
    try:
        assert container.circuits.gate(PLATFORM_CIRCUIT_KEY).admit() is False
    finally:
        event.remove(container.engine, "before_cursor_execute", on_execute)
    assert autocommit == [True]


def test_the_provider_registrys_account_read_runs_in_autocommit(container: Container) -> None:
    """The same hazard on every claimed record of a connector account: the registry reads
    the account (its version) before each run."""
    autocommit: list[bool] = []

    def on_execute(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM connector_accounts" in statement:
            autocommit.append(bool(cursor.connection.autocommit))

    event.listen(container.engine, "before_cursor_execute", on_execute)
    try:
        with pytest.raises(Permanent):
            container.providers.provider_for("ca_missing")
    finally:
        event.remove(container.engine, "before_cursor_execute", on_execute)
    assert autocommit == [True]
