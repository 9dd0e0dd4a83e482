"""Accounts added for one merchant at the same moment, on PostgreSQL: the merchant's
default is still its oldest enabled account (the client's row is locked before the default
is recomputed), and nothing deadlocks."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import api_clients, connector_accounts
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container

ROUNDS = 6
AT_ONCE = 3


@pytest.fixture
def container(make_postgres_database) -> Iterator[Container]:
    built = build_container(make_postgres_database())
    try:
        yield built
    finally:
        built.close()


def test_concurrent_adds_leave_the_oldest_enabled_account_as_the_default(
    container: Container,
) -> None:
    service = container.connector_account_service()
    for n in range(ROUNDS):
        merchant = create_client(container.uow, f"shop {n}", Role.MERCHANT).client
        barrier = threading.Barrier(AT_ONCE)
        failures: list[BaseException] = []

        def add(
            i: int,
            client_id: str = merchant.id,
            barrier: threading.Barrier = barrier,
            failures: list[BaseException] = failures,
        ) -> None:
            barrier.wait()
            try:
                service.create(
                    client_id,
                    provider="stripe",
                    name=f"account {i}",
                    credentials={"api_key": f"sk_test_concurrentKey000{i}"},
                )
            except BaseException as error:  # reported below, with the round
                failures.append(error)

        threads = [threading.Thread(target=add, args=(i,)) for i in range(AT_ONCE)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        assert failures == [], (n, failures)
        with container.engine.connect() as conn:
            rows = conn.execute(
                sa.select(connector_accounts.c.id, connector_accounts.c.created_at).where(
                    connector_accounts.c.client_id == merchant.id
                )
            ).all()
            default = conn.execute(
                sa.select(api_clients.c.default_connector_account_id).where(
                    api_clients.c.id == merchant.id
                )
            ).scalar_one()
        assert len(rows) == AT_ONCE
        assert default == min(rows, key=lambda r: (r.created_at, r.id)).id, n
