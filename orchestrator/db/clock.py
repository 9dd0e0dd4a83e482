"""The database clock, with a seam for tests.

Lease comparisons use one clock, the database's, so an API, workers and sweepers on hosts
with drifting clocks cannot disagree about whether a lease expired.  Every unit of work
reads it once with ``SELECT coalesce(:now, now())``: production passes NULL; tests pass the
instant freezegun froze, through ``FrozenClock``.  Fencing tokens keep writes safe even
when clocks are wrong; the clock only decides *when* a takeover may happen.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

import sqlalchemy as sa

from orchestrator.db.types import UtcDateTime


class Clock(Protocol):
    def override(self) -> datetime | None:
        """The instant to use instead of the database's ``now()``, or None."""


class DatabaseClock:
    def override(self) -> datetime | None:
        return None


class FrozenClock:
    """Passes Python's idea of now (frozen by freezegun in tests) to the database."""

    def override(self) -> datetime | None:
        return datetime.now(UTC)


def read_database_now(connection: sa.Connection, clock: Clock) -> datetime:
    override = clock.override()
    if connection.dialect.name == "sqlite":
        now_expr = sa.text("strftime('%Y-%m-%d %H:%M:%f', 'now') || '000'")
    else:
        now_expr = sa.text("now()")
    query = sa.select(
        sa.func.coalesce(
            sa.bindparam("now", override, type_=UtcDateTime()), now_expr, type_=UtcDateTime()
        )
    )
    value = connection.execute(query).scalar_one()
    assert isinstance(value, datetime)
    return value
