"""Stripe's idempotency layer, per API key.

For a POST carrying ``Idempotency-Key``::

    key unknown (or older than the TTL) ─> validate ─ fails ─> 400, nothing saved
                                             └─ ok ─> claim (in flight) ─> execute ─> save
    key in flight                        ─> 409 idempotency_key_in_use, nothing saved
    key saved, other endpoint or params  ─> 400 idempotency_error
    key saved, same endpoint and params  ─> the saved status and body, Idempotent-Replayed: true

The check and the claim happen in one critical section (no ``await`` between them, under the
simulator's lock), so two truly concurrent requests can never both execute.  A claim that
never completes (its handler was cancelled) is abandoned, not saved, like a request that never
reached Stripe's endpoint.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


def fingerprint(params: dict[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class SavedResponse:
    status: int
    body: bytes
    request_id: str
    intent_id: str | None = None
    record_id: str | None = None


@dataclass
class _Entry:
    path: str
    fingerprint: str
    created_at: float
    response: SavedResponse | None = None  # None while the first request executes


@dataclass(frozen=True)
class Replay:
    response: SavedResponse


@dataclass(frozen=True)
class InFlight:
    pass


@dataclass(frozen=True)
class Mismatch:
    first_path: str


@dataclass(frozen=True)
class Fresh:
    pass


Verdict = Replay | InFlight | Mismatch | Fresh


class IdempotencyStore:
    """Not thread-safe on its own: the caller holds the simulator's lock."""

    def __init__(self, ttl_seconds: float) -> None:
        self._ttl = ttl_seconds
        self._entries: dict[tuple[str, str], _Entry] = {}

    def check(self, scope: str, key: str, path: str, print_: str, now: float) -> Verdict:
        entry = self._entries.get((scope, key))
        if entry is None or now - entry.created_at >= self._ttl:
            return Fresh()
        if entry.response is None:
            return InFlight()
        if entry.path != path or entry.fingerprint != print_:
            return Mismatch(entry.path)
        return Replay(entry.response)

    def claim(self, scope: str, key: str, path: str, print_: str, now: float) -> None:
        self._entries[(scope, key)] = _Entry(path=path, fingerprint=print_, created_at=now)

    def save(self, scope: str, key: str, response: SavedResponse) -> None:
        entry = self._entries.get((scope, key))
        if entry is not None:
            entry.response = response

    def abandon(self, scope: str, key: str) -> None:
        entry = self._entries.get((scope, key))
        if entry is not None and entry.response is None:
            del self._entries[(scope, key)]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
