"""API clients (roles) and their keys (hashed; several per client)."""

from __future__ import annotations

import builtins
from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.compiled import prepare_once
from orchestrator.db.repositories.rows import to_client
from orchestrator.db.session import Row, Session
from orchestrator.db.tables import api_clients, api_keys
from orchestrator.domain.model import ApiClient, ApiKey, Role


def client_by_active_key() -> sa.Select[tuple[object, ...]]:
    """The client owning the active key ``:key_hash``, with that key's stored hash (for
    the caller's constant-time comparison): what every authentication reads, and what the
    accept's one statement starts from (``repositories.payments``).  A revoked key finds
    nothing, exactly as an unknown one."""
    return (
        sa.select(*api_clients.c, api_keys.c.key_hash)
        .select_from(api_keys.join(api_clients, api_clients.c.id == api_keys.c.client_id))
        .where(
            api_keys.c.key_hash == sa.bindparam("key_hash", type_=sa.String()),
            api_keys.c.revoked_at.is_(None),
        )
    )


# Every authenticated request runs this: built once, with a bound parameter (no statement
# construction or cache key per request).
BY_KEY_HASH = prepare_once(client_by_active_key())


def to_key(m: Row) -> ApiKey:
    return ApiKey(
        id=m["id"],
        client_id=m["client_id"],
        key_prefix=m["key_prefix"],
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
    )


class ClientRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add(self, *, id: str, name: str, role: Role, now: datetime) -> ApiClient:
        row = self._db.one(
            api_clients.insert()
            .values(id=id, name=name, role=role.value, created_at=now)
            .returning(*api_clients.c)
        )
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_client(row)

    def find_by_key_hash(self, key_hash: str) -> tuple[ApiClient, str] | None:
        """The client and its key's stored hash (for a constant-time comparison by the
        caller); None for an unknown or revoked key."""
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

    # -- keys ------------------------------------------------------------------------------

    def add_key(
        self, *, key_id: str, client_id: str, key_hash: str, key_prefix: str, now: datetime
    ) -> ApiKey:
        row = self._db.one(
            api_keys.insert()
            .values(
                id=key_id,
                client_id=client_id,
                key_hash=key_hash,
                key_prefix=key_prefix,
                created_at=now,
            )
            .returning(*api_keys.c)
        )
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_key(row)

    def keys(self, client_id: str) -> builtins.list[ApiKey]:
        rows = self._db.all(
            sa.select(api_keys)
            .where(api_keys.c.client_id == client_id)
            .order_by(api_keys.c.created_at, api_keys.c.id)
        )
        return [to_key(r) for r in rows]

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self._db.one(sa.select(api_keys).where(api_keys.c.id == key_id))
        return None if row is None else to_key(row)

    def revoke_key(self, key_id: str, now: datetime) -> ApiKey | None:
        """Revoke an active key; None: no such key, or revoked already (by a concurrent
        revoke, say: only one of them changes it, and only that one is audited)."""
        row = self._db.one(
            api_keys.update()
            .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=now)
            .returning(*api_keys.c)
        )
        return None if row is None else to_key(row)
