"""The accept path's authentication as one statement of its own (``Database.one``, on
PostgreSQL prepared on a pooled psycopg connection in autocommit) answers exactly as the
unit of work's read: active, revoked, unknown; and gives its connection back to the pool.
The authenticated claim (authentication and claim in one statement) inserts only for an
active merchant.  Real PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.tables import payments
from orchestrator.domain.model import PaymentRequest, Role
from orchestrator.services.accept import _claim
from orchestrator.services.api_keys import (
    authenticate,
    authenticate_by,
    create_client,
    hash_key,
    revoke_client,
)
from tests.harness.containers import build_container

# Fails on the server, after its parameter was sent.
ONE, NOUGHT = sa.literal(1, sa.Integer), sa.literal(0, sa.Integer)
FAILS = prepare_once(
    sa.select((ONE // NOUGHT).label("x")).where(sa.bindparam("k", type_=sa.String()).is_not(None))
)
REQUEST = PaymentRequest(amount=1999, currency="usd", payment_method="pm_card_visa")


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


def test_the_authenticated_claim_inserts_only_for_an_active_merchant(
    make_postgres_database,
) -> None:
    """One statement reads the client and claims: the row names the client it read, a
    taken key inserts nothing, and an ops, revoked or unknown key never inserts."""
    container = build_container(make_postgres_database())
    try:
        claim = container.authenticated_claim
        assert claim is not None
        merchant = create_client(container.uow, "merchant", Role.MERCHANT)
        ops = create_client(container.uow, "ops", Role.OPS)
        revoked = create_client(container.uow, "revoked", Role.MERCHANT)
        revoke_client(container.uow, revoked.client.id)

        def attempt(api_key: str, idempotency_key: str) -> tuple[object, bool]:
            _record, values = _claim(
                claim.now(), container.settings, "", idempotency_key, REQUEST, "f" * 64
            )
            found, inserted = claim(hash_key(api_key), values, False)
            return (None if found is None else found[0]), inserted

        assert attempt(merchant.api_key, "k1") == (merchant.client, True)
        assert attempt(merchant.api_key, "k1") == (merchant.client, False)  # taken
        assert attempt(ops.api_key, "k2") == (ops.client, False)
        found, inserted = attempt(revoked.api_key, "k3")
        assert found is not None and not inserted
        assert attempt("pok_" + "z" * 43, "k4") == (None, False)
        with container.engine.connect() as connection:
            rows = connection.execute(
                sa.select(payments.c.client_id, payments.c.idempotency_key)
            ).all()
        assert [tuple(row) for row in rows] == [(merchant.client.id, "k1")]
        assert container.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        container.close()


def test_sqlite_has_no_authenticated_claim(tmp_path) -> None:
    container = build_container(f"sqlite:///{tmp_path / 'direct.sqlite3'}")
    try:
        assert container.authenticated_claim is None
    finally:
        container.close()


def test_a_failed_statement_of_its_own_hides_its_parameters(make_postgres_database) -> None:
    """Its parameters hold key hashes and idempotency keys: an error (and so a logged
    traceback) names the statement, never them, as the engine's own errors do."""
    container = build_container(make_postgres_database())
    try:
        with pytest.raises(sa.exc.DBAPIError) as raised:
            container.database.one(FAILS, {"k": "SECRETKEY"})
        assert "SECRETKEY" not in str(raised.value)
        assert container.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        container.close()
