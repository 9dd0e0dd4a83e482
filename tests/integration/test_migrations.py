"""The Alembic migrations build exactly the schema the code declares, on both databases."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from orchestrator.db.migrate import downgrade, upgrade
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
