"""The accept's statements that run outside a unit of work, each its own transaction,
through the session's one-statement forms (``Database.one``, ``AsyncDatabase.one``).

* ``ClientLookup``: the authentication's read by key hash (``clients.BY_KEY_HASH``).
* ``AuthenticatedClaim``: the authentication and the claim as one statement
  (``payments.authenticated_claim_statement``): one pool checkout and one round trip
  instead of two of each.  In autocommit the statement is its own transaction, so its
  NOTIFY is sent when it returns.  PostgreSQL only (SQLite keeps the read and the claim
  apart).
* ``LoopAuthenticatedClaim``: the same on the API's event loop, with the replay's read
  (``payments.BY_KEY``).  Only an active merchant's key is answered here: a new key's
  202, a taken key's replay or 422 (the thread path's own
  ``services.accept.replay_existing``).  Everything else (a stale clock sample, an
  unknown, revoked or ops key, a key whose record is gone, no connection in time) makes
  it answer None, and the request is served again from the start by the thread path
  (``routes.payments.serve_accept``), whose answers stay the only ones for those cases.
  The statement inserted nothing then, so the second run sees what the first would have.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.db.async_session import AsyncDatabase, NoConnection
from orchestrator.db.clock import Clock, engine_now, sampled_now
from orchestrator.db.database import Database
from orchestrator.db.repositories.clients import BY_KEY_HASH
from orchestrator.db.repositories.payments import BY_KEY, authenticated_claim_statement
from orchestrator.db.repositories.rows import to_client, to_payment
from orchestrator.db.session import Row
from orchestrator.domain.model import ApiClient, PaymentRecord

Found = tuple[tuple[ApiClient, str] | None, bool]


class ClientLookup:
    """``find(key_hash)``: the client and its stored hash, or None (as
    ``ClientRepository.find_by_key_hash``)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def __call__(self, key_hash: str) -> tuple[ApiClient, str] | None:
        row = self._database.one(BY_KEY_HASH, {"key_hash": key_hash})
        return None if row is None else (to_client(row), row["key_hash"])


def _claim_params(key_hash: str, values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "key_hash": key_hash}


def _answer(row: Row | None) -> Found:
    """The client and its stored hash (None: no such key), and whether the payment was
    inserted."""
    if row is None:
        return None, False
    return (to_client(row), row["key_hash"]), row["claimed_rows"] == 1


class AuthenticatedClaim:
    """``__call__`` answers the client's row and stored hash (None: no such key) and
    whether the payment was inserted (False: the key is taken, or the client is revoked or
    not a merchant; the caller tells which from the row).  ``now()`` is the database clock
    as a unit of work reads it (``orchestrator.db.clock``)."""

    def __init__(self, database: Database, clock: Clock) -> None:
        assert database.is_postgres, "one statement for both is PostgreSQL's"
        self._database = database
        self._clock = clock

    def now(self) -> datetime:
        return engine_now(self._database, self._clock)

    def __call__(self, key_hash: str, values: dict[str, Any], notify: bool) -> Found:
        statement = authenticated_claim_statement(tuple(sorted(values)), notify)
        return _answer(self._database.one(statement, _claim_params(key_hash, values)))


class LoopAuthenticatedClaim:
    """``AuthenticatedClaim`` on the event loop (``services.accept.AuthenticatedClaimOnLoop``);
    every answer may be None: take the thread path."""

    def __init__(self, database: AsyncDatabase, clock: Clock) -> None:
        self._database = database
        self._clock = clock

    def now(self) -> datetime | None:
        """The database clock when it needs no round trip; None: take the thread path."""
        return sampled_now(self._database.engine, self._clock)

    async def __call__(self, key_hash: str, values: dict[str, Any], notify: bool) -> Found | None:
        statement = authenticated_claim_statement(tuple(sorted(values)), notify)
        try:
            row = await self._database.one(statement, _claim_params(key_hash, values))
        except NoConnection:
            return None
        return _answer(row)

    async def find_by_key(self, client_id: str, idempotency_key: str) -> PaymentRecord | None:
        """The record holding a taken key, for its replay (``PaymentRepository.find_by_key``).
        None when there is none (retention purged it) or no connection could be had: the
        thread path answers either."""
        given = {"client_id": client_id, "idempotency_key": idempotency_key}
        try:
            row = await self._database.one(BY_KEY, given)
        except NoConnection:
            return None
        return None if row is None else to_payment(row)

    async def close(self) -> None:
        await self._database.close()

    @property
    def waiting(self) -> int:
        """Requests queued for a connection right now (the tests watch it)."""
        return int(getattr(self._database, "waiting", 0))
