"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps in and out.

    PostgreSQL stores ``timestamptz``; SQLite stores naive text that we read back as UTC.
    Naive datetimes are refused on the way in: a local time silently stored as UTC would
    shift every lease by the server's offset.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


JsonDocument: sa.types.TypeEngine[Any] = sa.JSON().with_variant(JSONB(), "postgresql")
