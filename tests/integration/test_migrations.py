"""The Alembic migrations build exactly the schema the code declares, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from orchestrator.db.migrate import downgrade, upgrade
from orchestrator.db.repositories.outcomes import OutcomeRepository
from orchestrator.db.tables import metadata


def _differences(database_url: str) -> list[object]:
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _tables(database_url: str) -> set[str]:
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_the_migrated_schema_matches_the_declared_tables(database_url):
    upgrade(database_url)

    assert _differences(database_url) == []
    assert _tables(database_url) == set(metadata.tables)


def test_upgrading_twice_is_harmless_and_downgrade_removes_everything(database_url):
    upgrade(database_url)
    upgrade(database_url)
    assert _differences(database_url) == []

    downgrade(database_url, "base")
    assert _tables(database_url) == set()

    upgrade(database_url)
    assert _differences(database_url) == []


def test_refunds_stored_before_0016_keep_working_and_a_refund_sync_fits_after(database_url):
    """0016 widens the operation kinds and adds one-refund-row-per-provider-refund: a refund
    written at 0013 is still read, and the new kind and the index hold after the upgrade."""
    upgrade(database_url, "0013")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    payment = _payment("pay_" + "1" * 32, now)
    operation = {
        "payment_id": payment["id"],
        "client_id": "cli_1",
        "status": "succeeded",
        "recovery_point": "completed",
        "lease_token": 1,
        "attempts": 1,
        "unknown_outcomes": 0,
        "step_attempts": 1,
        "currency": "usd",
        "metadata": "{}",
        "created_at": now,
        "updated_at": now,
    }
    try:
        with engine.begin() as conn:
            conn.execute(_insert("api_clients", _client(now)))
            conn.execute(_insert("payments", payment))
            conn.execute(
                _insert(
                    "operations",
                    {
                        **operation,
                        "id": "rfd_" + "1" * 32,
                        "kind": "refund",
                        "amount": 300,
                        "provider_object_id": "re_1",
                    },
                )
            )

        upgrade(database_url)

        with engine.begin() as conn:
            kinds = conn.execute(sa.text("SELECT id, kind FROM operations")).all()
            assert [tuple(k) for k in kinds] == [("rfd_" + "1" * 32, "refund")]
            conn.execute(
                _insert("operations", {**operation, "id": "rsy_" + "1" * 32, "kind": "refund_sync"})
            )
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(
                _insert(
                    "operations",
                    {
                        **operation,
                        "id": "rfd_" + "2" * 32,
                        "kind": "refund",
                        "amount": 300,
                        "provider_object_id": "re_1",
                    },
                )
            )
    finally:
        engine.dispose()


def test_0017_starts_each_payments_event_number_at_its_events_max(database_url):
    """The event sequence becomes a column of the payment: a payment with events before the
    upgrade continues its numbers after it, and one without starts at 0."""
    upgrade(database_url, "0016")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 4, tzinfo=UTC)
    with_events, without = "pay_" + "1" * 32, "pay_" + "2" * 32
    try:
        with engine.begin() as conn:
            conn.execute(_insert("api_clients", _client(now)))
            for payment_id in (with_events, without):
                conn.execute(_insert("payments", _payment(payment_id, now)))
            for sequence in (1, 2):
                conn.execute(
                    _insert(
                        "outbox_events",
                        {
                            "payment_id": with_events,
                            "event_type": "payment.succeeded",
                            "payload": {},
                            "created_at": now,
                            "public_id": f"evt_{sequence}",
                            "sequence": sequence,
                        },
                    )
                )

        upgrade(database_url)

        with engine.begin() as conn:
            numbers = conn.execute(
                sa.text("SELECT id, latest_event_sequence FROM payments ORDER BY id")
            ).all()
            assert [tuple(n) for n in numbers] == [(with_events, 2), (without, 0)]
            following = OutcomeRepository(conn).next_event_sequence(with_events)
            assert following == 3
    finally:
        engine.dispose()


def _client(now: datetime) -> dict[str, object]:
    return {
        "id": "cli_1",
        "name": "shop",
        "role": "merchant",
        "key_hash": "0" * 64,
        "key_prefix": "pk",
        "created_at": now,
    }


def _payment(payment_id: str, now: datetime) -> dict[str, object]:
    """A finished payment with only the columns that exist at 0013."""
    return {
        "id": payment_id,
        "client_id": "cli_1",
        "amount": 1000,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "metadata": "{}",
        "status": "succeeded",
        "recovery_point": "completed",
        "lease_token": 1,
        "attempts": 1,
        "unknown_outcomes": 0,
        "confirm_attempts": 1,
        "provider": "stripe",
        "created_at": now,
        "updated_at": now,
        "amount_captured": 1000,
    }


def _insert(table: str, values: dict[str, object]) -> sa.Insert:
    # The declared table, for its column types (JSON, UTC timestamps); only the given
    # columns are written, all of which exist at 0013 already.
    return metadata.tables[table].insert().values(**values)
