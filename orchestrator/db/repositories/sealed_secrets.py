"""The columns that hold a secret sealed under ``PAYORCH_SECRET_KEY`` (``events.secret_box``),
read a page at a time and resealed compare-and-set: what ``services.secret_rotation`` moves
to the current key.

A reseal writes only if the column still holds what was read, so a secret changed meanwhile
(an endpoint's secret rotated, an account's credentials replaced: both already sealed under
the current key) is never overwritten with the old one resealed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa

from orchestrator.db.session import Session
from orchestrator.db.tables import connector_accounts, webhook_endpoints


class SealedColumn(StrEnum):
    """Every sealed column, named ``table.column``; its purpose label is the box's."""

    ENDPOINT_SECRET = "webhook_endpoints.secret_encrypted"  # noqa: S105 - a column name
    ENDPOINT_PREVIOUS_SECRET = "webhook_endpoints.previous_secret_encrypted"  # noqa: S105
    CONNECTOR_CREDENTIALS = "connector_accounts.credentials_encrypted"


_COLUMNS: dict[SealedColumn, sa.Column[str]] = {
    SealedColumn.ENDPOINT_SECRET: webhook_endpoints.c.secret_encrypted,
    SealedColumn.ENDPOINT_PREVIOUS_SECRET: webhook_endpoints.c.previous_secret_encrypted,
    SealedColumn.CONNECTOR_CREDENTIALS: connector_accounts.c.credentials_encrypted,
}


@dataclass(frozen=True)
class SealedValue:
    row_id: str
    sealed: str


class SealedSecretRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def page(self, column: SealedColumn, *, after: str | None, limit: int) -> list[SealedValue]:
        """Up to ``limit`` non-NULL values of ``column``, by row id after ``after``."""
        sealed = _COLUMNS[column]
        row_id = sealed.table.c.id
        query = sa.select(row_id, sealed).where(sealed.is_not(None))
        if after is not None:
            query = query.where(row_id > after)
        rows = self._db.all(query.order_by(row_id).limit(limit))
        return [SealedValue(row["id"], row[sealed.name]) for row in rows]

    def reseal(self, column: SealedColumn, row_id: str, *, was: str, now: str) -> bool:
        """Replace ``was`` with ``now`` if the row still holds ``was``."""
        sealed = _COLUMNS[column]
        table = sealed.table
        touched = self._db.execute(
            sa.update(table).where(table.c.id == row_id, sealed == was).values({sealed.name: now})
        )
        return touched == 1
