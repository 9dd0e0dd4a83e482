"""API clients and their keys.

A client has one or more keys (``api_keys``; decision 0079): a key is rotated by issuing a
new one and revoking the old one once the client has switched, and revoking a leaked key
leaves the others working.  Revoking the client ends all of them.

Keys are ``pok_`` + 43 url-safe characters (256 random bits).  Only a SHA-256 of the key is
stored: with that much entropy a slow password hash adds nothing, and the lookup stays
one indexed read.  The stored hash is compared again in constant time, so nothing about
a near-miss leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.ids import new_api_key_id, new_client_id
from orchestrator.domain.model import ApiClient, ApiKey, Role

KEY_PREFIX = "pok_"


@dataclass(frozen=True)
class IssuedKey:
    client: ApiClient
    api_key: str
    key: ApiKey | None = None


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode("utf-8", "surrogateescape")).hexdigest()


def _new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_client(uow: UnitOfWorkFactory, name: str, role: Role) -> IssuedKey:
    """A client and its first key, in one transaction."""
    api_key = _new_key()
    with uow() as unit:
        now = unit.now()
        client = unit.clients.add(id=new_client_id(), name=name, role=role, now=now)
        key = _store_key(unit, client.id, api_key, now)
        unit.commit()
    return IssuedKey(client=client, api_key=api_key, key=key)


def issue_key(unit: UnitOfWork, client: ApiClient) -> IssuedKey:
    """Another key for ``client``, in the caller's transaction: its other keys keep
    working until each is revoked (how a key is rotated)."""
    api_key = _new_key()
    key = _store_key(unit, client.id, api_key, unit.now())
    return IssuedKey(client=client, api_key=api_key, key=key)


def _store_key(unit: UnitOfWork, client_id: str, api_key: str, now: datetime) -> ApiKey:
    return unit.clients.add_key(
        key_id=new_api_key_id(),
        client_id=client_id,
        key_hash=hash_key(api_key),
        key_prefix=api_key[:12],
        now=now,
    )


def authenticate(uow: UnitOfWorkFactory, api_key: str) -> ApiClient | None:
    """The active client owning ``api_key``, or None.  Revocation takes effect at once:
    there is no cache between this read and the database.

    ``uow``: any factory works; the API passes read-only single-statement units
    (``Container.lookup_uow``: no BEGIN/ROLLBACK around the one read on PostgreSQL)."""
    if not plausible_key(api_key):
        return None
    with uow() as unit:
        return active_client(unit, api_key)


# A key hash -> the client and its stored hash, or None (ClientRepository.find_by_key_hash's
# answer; Container.find_client).
FindClient = Callable[[str], "tuple[ApiClient, str] | None"]


def authenticate_by(find: FindClient, api_key: str) -> ApiClient | None:
    """As ``authenticate``, with the read given as a function (the accept path's: on
    PostgreSQL a prepared statement on the pooled connection, ``Database.one``)."""
    if not plausible_key(api_key):
        return None
    candidate = hash_key(api_key)
    return active_found(find(candidate), candidate)


def plausible_key(api_key: str) -> bool:
    return api_key.startswith(KEY_PREFIX) and len(api_key) <= 200


def active_client(uow: UnitOfWork, api_key: str) -> ApiClient | None:
    candidate = hash_key(api_key)
    return active_found(uow.clients.find_by_key_hash(candidate), candidate)


def active_found(found: tuple[ApiClient, str] | None, candidate: str) -> ApiClient | None:
    """The client a read by ``candidate`` (a key's hash) found, when it is active."""
    if found is None:
        return None
    client, stored = found
    if not hmac.compare_digest(stored, candidate) or client.revoked_at is not None:
        return None
    return client


def list_clients(uow: UnitOfWorkFactory) -> list[ApiClient]:
    with uow() as unit:
        return unit.clients.list()


def revoke_client(uow: UnitOfWorkFactory, client_id: str) -> ApiClient | None:
    with uow() as unit:
        client = unit.clients.revoke(client_id, unit.now())
        unit.commit()
    return client
