"""Adyen's idempotency layer (docs.adyen.com/development-resources/api-idempotency).

For a POST carrying ``Idempotency-Key`` (at most 64 characters), per API key (Adyen: per
company account)::

    key unknown (or older than the TTL) ─> claim (in flight) ─> execute ─> save the answer
    key in flight                        ─> 422, errorCode 704, ``transient-error: true``
    key saved                            ─> the saved status and body, nothing executed

Adyen does not document comparing the body of a replay, so the simulator does not: the
first answer comes back whatever the replay sends (never reuse a key for another request).
Validation errors (4xx) are not saved: the request never executed.  Check and claim happen
in one critical section under the simulator's lock, so two concurrent twins never both run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SavedResponse:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class _Entry:
    created_at: float
    response: SavedResponse | None = None  # None while the first request executes


@dataclass(frozen=True)
class Replay:
    response: SavedResponse


@dataclass(frozen=True)
class InFlight:
    pass


@dataclass(frozen=True)
class Fresh:
    pass


Verdict = Replay | InFlight | Fresh


class IdempotencyStore:
    """Not thread-safe on its own: the caller holds the simulator's lock."""

    def __init__(self, ttl_seconds: float) -> None:
        self._ttl = ttl_seconds
        self._entries: dict[tuple[str, str], _Entry] = {}

    def check(self, scope: str, key: str, now: float) -> Verdict:
        entry = self._entries.get((scope, key))
        if entry is None or now - entry.created_at >= self._ttl:
            return Fresh()
        if entry.response is None:
            return InFlight()
        return Replay(entry.response)

    def claim(self, scope: str, key: str, now: float) -> None:
        self._entries[(scope, key)] = _Entry(created_at=now)

    def save(self, scope: str, key: str, response: SavedResponse) -> None:
        entry = self._entries.get((scope, key))
        if entry is not None:
            entry.response = response

    def abandon(self, scope: str, key: str) -> None:
        entry = self._entries.get((scope, key))
        if entry is not None and entry.response is None:
            del self._entries[(scope, key)]

    def __len__(self) -> int:
        return len(self._entries)
