"""API clients: hashed keys and roles."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.repositories.rows import to_client
from orchestrator.db.session import Session
from orchestrator.db.tables import api_clients
from orchestrator.domain.model import ApiClient, Role

# Every authenticated request runs this: built once, with a bound parameter (no statement
# construction or cache key per request).
BY_KEY_HASH = prepare_once(
    sa.select(api_clients).where(api_clients.c.key_hash == sa.bindparam("key_hash"))
)


class ClientRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add(
        self, *, id: str, name: str, role: Role, key_hash: str, key_prefix: str, now: datetime
    ) -> ApiClient:
        row = self._db.one(
            api_clients.insert()
            .values(
                id=id,
                name=name,
                role=role.value,
                key_hash=key_hash,
                key_prefix=key_prefix,
                created_at=now,
            )
            .returning(*api_clients.c)
        )
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_client(row)

    def find_by_key_hash(self, key_hash: str) -> tuple[ApiClient, str] | None:
        """The client and its stored hash (for a constant-time comparison by the caller)."""
        row = self._db.one(BY_KEY_HASH, {"key_hash": key_hash})
        return None if row is None else (to_client(row), row["key_hash"])

    def get(self, client_id: str) -> ApiClient | None:
        row = self._db.one(sa.select(api_clients).where(api_clients.c.id == client_id))
        return None if row is None else to_client(row)

    def list(self) -> list[ApiClient]:
        rows = self._db.all(sa.select(api_clients).order_by(api_clients.c.created_at))
        return [to_client(r) for r in rows]

    def revoke(self, client_id: str, now: datetime) -> ApiClient | None:
        row = self._db.one(
            api_clients.update()
            .where(api_clients.c.id == client_id)
            .values(revoked_at=sa.func.coalesce(api_clients.c.revoked_at, now))
            .returning(*api_clients.c)
        )
        return None if row is None else to_client(row)
