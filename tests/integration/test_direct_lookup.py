"""The accept path's authentication on the pooled psycopg connection (orchestrator.db.direct)
answers exactly as the unit of work's read: active, revoked, unknown; and gives its
connection back to the pool.  Real PostgreSQL."""

from __future__ import annotations

from orchestrator.domain.model import Role
from orchestrator.services.api_keys import (
    authenticate,
    authenticate_by,
    create_client,
    revoke_client,
)
from tests.harness.containers import build_container


def test_the_direct_read_answers_as_the_unit_of_work_and_revocation_is_immediate(
    make_postgres_database,
) -> None:
    container = build_container(make_postgres_database())
    try:
        issued = create_client(container.uow, "direct", Role.MERCHANT)
        found = authenticate_by(container.find_client, issued.api_key)
        assert found is not None and found == authenticate(container.lookup_uow, issued.api_key)
        assert found.created_at.utcoffset() is not None  # UTC-aware, as the UoW gives it
        assert authenticate_by(container.find_client, issued.api_key + "x") is None
        assert authenticate_by(container.find_client, "not-a-key") is None
        revoke_client(container.uow, issued.client.id)
        assert authenticate_by(container.find_client, issued.api_key) is None  # no cache
        assert container.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        container.close()


def test_sqlite_keeps_the_unit_of_work(tmp_path) -> None:
    container = build_container(f"sqlite:///{tmp_path / 'direct.sqlite3'}")
    try:
        issued = create_client(container.uow, "direct", Role.MERCHANT)
        assert authenticate_by(container.find_client, issued.api_key) == issued.client
    finally:
        container.close()
