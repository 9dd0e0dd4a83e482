"""The Alembic migrations build exactly the schema the code declares, on both databases."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from orchestrator.cli.exit_codes import EXIT_FAILED
from orchestrator.db.migrate import MigrationRefused, downgrade, upgrade
from orchestrator.db.repositories.clients import ClientRepository
from orchestrator.db.repositories.outcomes import OutcomeRepository
from orchestrator.db.session import Session
from orchestrator.db.tables import metadata
from orchestrator.services.api_keys import hash_key
from tests.integration.hardening_helpers import payorch_environment
from tests.support.processes import payorch_command, process_environment


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
    # The declared table's column types (JSON, UTC timestamps) where it still declares the
    # column; a column a later revision dropped (api_clients.key_hash at 0019) is written as
    # plain text.  Only the given columns are written.
    declared = metadata.tables[table].c
    columns = [
        sa.column(name, declared[name].type if name in declared else sa.String()) for name in values
    ]
    return sa.table(table, *columns).insert().values(**values)


def test_0019_moves_each_clients_key_so_every_key_in_use_keeps_working(database_url):
    upgrade(database_url, "0018")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 5, tzinfo=UTC)
    key = "pok_" + "k" * 43
    active, revoked = _client(now), {**_client(now), "id": "cli_2", "key_hash": "f" * 64}
    active["key_hash"] = hash_key(key)
    revoked["revoked_at"] = now
    try:
        with engine.begin() as conn:
            conn.execute(_insert("api_clients", active))
            conn.execute(_insert("api_clients", revoked))

        upgrade(database_url)

        with engine.connect() as conn:
            clients = ClientRepository(Session(conn))
            found = clients.find_by_key_hash(hash_key(key))
            assert found is not None and found[0].id == "cli_1"
            assert clients.find_by_key_hash("f" * 64) is None
            moved = conn.execute(
                sa.text("SELECT id, client_id, key_prefix, revoked_at IS NULL FROM api_keys")
            ).all()
            assert sorted(tuple(m) for m in moved) == [
                ("key_" + hash_key(key)[:24], "cli_1", "pk", True),
                ("key_" + "f" * 24, "cli_2", "pk", False),
            ]

        downgrade(database_url, "0018")

        with engine.begin() as conn:
            back = conn.execute(sa.text("SELECT id, key_hash FROM api_clients ORDER BY id")).all()
            assert [tuple(b) for b in back] == [("cli_1", hash_key(key)), ("cli_2", "f" * 64)]
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_0031_stops_on_a_ledger_already_out_of_balance_and_names_the_payment(
    make_postgres_database,
):
    """The trigger would refuse every later entry of a payment already out of balance: the
    upgrade stops and names it (nothing of 0031 applied); once its lines are booked to
    zero the upgrade runs, and from then on the trigger refuses such a commit."""
    database_url = make_postgres_database()
    upgrade(database_url, "0030")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 5, tzinfo=UTC)
    payment_id = "pay_" + "3" * 32
    line = {
        "payment_id": payment_id,
        "account": "provider_receivable:stripe",
        "amount": 1000,
        "currency": "usd",
        "created_at": now,
    }
    version = sa.text("SELECT version_num FROM alembic_version")
    try:
        with engine.begin() as conn:
            # The key columns moved to api_keys at 0019.
            client = {k: v for k, v in _client(now).items() if not k.startswith("key_")}
            conn.execute(_insert("api_clients", client))
            conn.execute(_insert("payments", _payment(payment_id, now)))
            conn.execute(_insert("ledger_lines", line))

        with pytest.raises(MigrationRefused, match=f"{payment_id} usd \\+1000"):
            upgrade(database_url)
        with engine.connect() as conn:
            assert conn.execute(version).scalar_one() == "0030"
        # What an operator sees: one line naming the payment, exit 1, no traceback.
        cli = subprocess.run(
            payorch_command("db", "upgrade"),
            env=process_environment(payorch_environment(database_url)),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert cli.returncode == EXIT_FAILED, cli.stderr
        assert cli.stderr.startswith("payorch: the upgrade stopped: 0031: ledger lines")
        assert f"{payment_id} usd +1000" in cli.stderr
        assert "Traceback" not in cli.stderr and len(cli.stderr.strip().splitlines()) == 1

        with engine.begin() as conn:
            conn.execute(
                _insert(
                    "ledger_lines", {**line, "account": "merchant_payable:cli_1", "amount": -1000}
                )
            )
        upgrade(database_url, "0031")

        with engine.connect() as conn:
            assert conn.execute(version).scalar_one() == "0031"
        with pytest.raises(sa.exc.IntegrityError, match="do not balance"), engine.begin() as conn:
            conn.execute(_insert("ledger_lines", line))
    finally:
        engine.dispose()


def _ledger_line(payment_id: str, account: str, amount: int, now: datetime) -> dict[str, object]:
    return {
        "payment_id": payment_id,
        "account": account,
        "amount": amount,
        "currency": "usd",
        "created_at": now,
    }


def _accounts(engine: sa.Engine) -> list[tuple[str, str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT payment_id, account, amount FROM ledger_lines ORDER BY id")
        ).all()
    return [(r.payment_id, r.account, int(r.amount)) for r in rows]


def test_0032_renames_each_provider_line_to_its_payments_account_and_back(database_url):
    """Lines booked under a provider's name move to the account the payment ran on (the
    platform's own: ca_platform_stripe), amounts untouched (on PostgreSQL the balance
    trigger of 0031 re-sums each renamed payment at commit); the downgrade names the
    provider again."""
    upgrade(database_url, "0031")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 5, tzinfo=UTC)
    platform, adyen, manual = ("pay_" + c * 32 for c in "456")
    before = [
        (platform, "provider_receivable:stripe", 1000),
        (platform, "merchant_payable:cli_1", -1000),
        (adyen, "provider_receivable:adyen", 1000),
        (adyen, "merchant_payable:cli_1", -1000),
        (adyen, "merchant_payable:cli_1", 400),  # a refund
        (adyen, "provider_receivable:adyen", -400),
        (manual, "provider_authorized:stripe", 1000),
        (manual, "merchant_authorized:cli_1", -1000),
    ]
    try:
        with engine.begin() as conn:
            client = {k: v for k, v in _client(now).items() if not k.startswith("key_")}
            conn.execute(_insert("api_clients", client))
            conn.execute(_insert("payments", _payment(platform, now)))
            conn.execute(
                _insert(
                    "payments",
                    {**_payment(adyen, now), "provider": "adyen", "connector_account_id": "ca_a"},
                )
            )
            conn.execute(
                _insert("payments", {**_payment(manual, now), "connector_account_id": "ca_s"})
            )
            for payment_id, account, amount in before:
                conn.execute(
                    _insert("ledger_lines", _ledger_line(payment_id, account, amount, now))
                )

        upgrade(database_url, "0032")

        assert _accounts(engine) == [
            (platform, "provider_receivable:ca_platform_stripe", 1000),
            (platform, "merchant_payable:cli_1", -1000),
            (adyen, "provider_receivable:ca_a", 1000),
            (adyen, "merchant_payable:cli_1", -1000),
            (adyen, "merchant_payable:cli_1", 400),
            (adyen, "provider_receivable:ca_a", -400),
            (manual, "provider_authorized:ca_s", 1000),
            (manual, "merchant_authorized:cli_1", -1000),
        ]

        downgrade(database_url, "0031")

        assert _accounts(engine) == before
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_0032_stops_on_a_line_under_another_provider_than_its_payments_and_names_it(
    make_postgres_database,
):
    """A line under a provider the payment never ran on was not written by payorch: which
    account it belongs to would be a guess, so the upgrade names it and renames nothing."""
    database_url = make_postgres_database()
    upgrade(database_url, "0031")
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    now = datetime(2026, 12, 5, tzinfo=UTC)
    payment_id = "pay_" + "7" * 32
    before = [
        (payment_id, "provider_receivable:stripe", 1000),
        (payment_id, "merchant_payable:cli_1", -1000),
        (payment_id, "provider_receivable:adyen", 300),
        (payment_id, "merchant_payable:cli_1", -300),
    ]
    version = sa.text("SELECT version_num FROM alembic_version")
    try:
        with engine.begin() as conn:
            client = {k: v for k, v in _client(now).items() if not k.startswith("key_")}
            conn.execute(_insert("api_clients", client))
            conn.execute(_insert("payments", _payment(payment_id, now)))
            for line in before:
                conn.execute(_insert("ledger_lines", _ledger_line(*line, now)))

        with pytest.raises(MigrationRefused, match=f"{payment_id}, provider_receivable:adyen"):
            upgrade(database_url, "0032")

        with engine.connect() as conn:
            assert conn.execute(version).scalar_one() == "0031"
        assert _accounts(engine) == before  # the stripe line's rename rolled back too
    finally:
        engine.dispose()
