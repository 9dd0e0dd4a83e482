"""The ordered log of every API request the simulator received (``GET /_sim/requests``).

An entry is written when the request arrives, so the log is in arrival order even when a
stalled request answers long after later ones; ``status`` stays ``null`` until it answers.
Tests read it to assert what a client did, e.g. "after the timed-out confirm, the next
request about that intent was a GET".
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass
class LoggedRequest:
    seq: int
    at: float
    method: str
    path: str
    operation: str
    idempotency_key: str | None
    intent_id: str | None = None
    record_id: str | None = None
    status: int | None = None
    replayed: bool = False
    fault: str | None = None
    duration_ms: float | None = None
    # Which credentials sent it: the API key's last four characters (never the key) and
    # the ``Stripe-Account`` header (a connected account), for tests of connector accounts.
    key_last4: str | None = None
    stripe_account: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "method": self.method,
            "path": self.path,
            "operation": self.operation,
            "idempotency_key": self.idempotency_key,
            "intent_id": self.intent_id,
            "record_id": self.record_id,
            "status": self.status,
            "replayed": self.replayed,
            "fault": self.fault,
            "duration_ms": self.duration_ms,
            "key_last4": self.key_last4,
            "stripe_account": self.stripe_account,
        }


class RequestLog:
    """Not thread-safe on its own: the caller holds the simulator's lock."""

    def __init__(self, max_entries: int) -> None:
        self._entries: deque[LoggedRequest] = deque(maxlen=max_entries)
        self._seq = itertools.count(1)

    def open(
        self, method: str, path: str, operation: str, idempotency_key: str | None
    ) -> LoggedRequest:
        entry = LoggedRequest(
            seq=next(self._seq),
            at=time.time(),
            method=method,
            path=path,
            operation=operation,
            idempotency_key=idempotency_key,
        )
        self._entries.append(entry)
        return entry

    def entries(
        self, *, intent_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            e.to_json()
            for e in self._entries
            if (intent_id is None or e.intent_id == intent_id)
            and (record_id is None or e.record_id == record_id)
        ]

    def clear(self) -> None:
        self._entries.clear()
