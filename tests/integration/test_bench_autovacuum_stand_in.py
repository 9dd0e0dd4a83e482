"""The outage bench's stand-in for autovacuum (decision 0111), on the real PostgreSQL: it
analyses the scenario's database at its naptime while the server's autovacuum is off, and
does nothing while it is on."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from bench import maintenance
from orchestrator.db.migrate import upgrade


def analysed(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                sa.text(
                    "SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables"
                    " WHERE relname = 'payments'"
                )
            ).scalar_one()
        )


def test_the_stand_in_analyses_at_its_naptime_only_where_autovacuum_is_off(
    make_postgres_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = make_postgres_database()
    upgrade(url)
    engine = sa.create_engine(url)
    monkeypatch.setattr(maintenance, "NAPTIME_SECONDS", 0.2)
    try:
        server_runs_autovacuum = maintenance.autovacuum_is_on(engine)
        # Nothing analysed the new database before the stand-in.  (Checked here, not
        # inside: its first pass may come within a naptime of 0.2 s on a slow host.)
        assert not analysed(engine)
        with maintenance.autovacuum_stand_in(engine) as standing_in:
            deadline = time.monotonic() + 10.0
            while not analysed(engine) and time.monotonic() < deadline:
                time.sleep(0.1)  # polling the statistics view for a condition
        assert standing_in is not server_runs_autovacuum
        if standing_in:
            assert analysed(engine)  # a manual ANALYZE: the stand-in's
        else:
            # The server's own autovacuum: the stand-in ran no ANALYZE of its own.
            assert not analysed(engine)
    finally:
        engine.dispose()
