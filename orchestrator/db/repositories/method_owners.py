"""Who owns a saved customer or payment method (decision 0063).

``claim`` is the race-safe "first merchant wins": ``INSERT … ON CONFLICT DO NOTHING`` on
(kind, external id), then the owner read back.  Two merchants naming one new customer at
once both insert; the primary key lets one row in, and both read the same owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.session import Session
from orchestrator.db.tables import payment_method_owners
from orchestrator.domain.method_ownership import OwnedKind

c = payment_method_owners.c


@dataclass(frozen=True)
class Owner:
    client_id: str
    customer: str | None


class MethodOwnerRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def claim(
        self,
        kind: OwnedKind,
        external_id: str,
        *,
        client_id: str,
        customer: str | None,
        now: datetime,
    ) -> Owner:
        """Record ``client_id`` as the owner unless someone is already; the owner."""
        insert = postgresql.insert if self._db.dialect == "postgresql" else sqlite.insert
        self._db.execute(
            insert(payment_method_owners)
            .values(
                kind=kind.value,
                external_id=external_id,
                client_id=client_id,
                customer=customer,
                created_at=now,
            )
            .on_conflict_do_nothing(index_elements=["kind", "external_id"])
        )
        owner = self.owner_of(kind, external_id)
        assert owner is not None, "the row was inserted or already there"
        return owner

    def owner_of(self, kind: OwnedKind, external_id: str) -> Owner | None:
        row = self._db.one(
            sa.select(c.client_id, c.customer).where(
                c.kind == kind.value, c.external_id == external_id
            )
        )
        return None if row is None else Owner(row["client_id"], row["customer"])
