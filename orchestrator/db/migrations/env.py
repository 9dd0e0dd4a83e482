"""Alembic environment: online migrations only (the URL comes from orchestrator.db.migrate)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from orchestrator.db.tables import metadata

config = context.config
url = config.get_main_option("sqlalchemy.url")
assert url is not None
engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode rebuilds tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
