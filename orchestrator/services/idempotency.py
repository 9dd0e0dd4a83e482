"""The idempotent claim, shared by every resource a client creates with an Idempotency-Key
(payments, refunds).

One short transaction tries to insert the new record with ``INSERT … ON CONFLICT DO
NOTHING`` on (client, key); no row inserted means the key is taken, and the record that
holds it is read instead.  There is no check before the insert, so there is no window in
which two requests with one key both see it free.  The caller then compares fingerprints:
the same request is a replay (answered with the stored bytes), another one is a reuse
(422).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")


class IdempotencyKeyReused(Exception):
    def __init__(self, record: Any) -> None:
        super().__init__("idempotency key reused with a different request")
        self.record = record


@dataclass(frozen=True)
class Claimed(Generic[T]):
    record: T
    created: bool


def claim_key(
    uow: UnitOfWorkFactory,
    *,
    insert: Callable[[UnitOfWork, datetime], T | None],
    find: Callable[[UnitOfWork], T | None],
) -> Claimed[T]:
    """``insert`` (in the claim's transaction, with the database clock) returns the new
    record, or None when the key is taken; ``find`` reads the record holding the key.  An
    exception from ``insert`` rolls everything back: nothing is stored."""
    # Two rounds at most: a conflicting row can vanish between our INSERT and SELECT only
    # if retention purged its key in between, and then the second INSERT wins.
    for _ in range(2):
        with uow() as unit:
            record = insert(unit, unit.now())
            if record is not None:
                unit.commit()
                return Claimed(record, created=True)
            existing = find(unit)
            if existing is not None:
                return Claimed(existing, created=False)
    raise RuntimeError("idempotency claim found neither a new nor an existing record")


def require_same_request(
    record: Any, stored_fingerprint: str | None, fingerprint: str, *, client_id: str, key_tag: str
) -> None:
    """A taken key with another request's fingerprint is a reuse (422), never a replay."""
    if stored_fingerprint != fingerprint:
        metrics.KEY_REUSE_CONFLICTS.inc()
        log.info("idempotency_key_reused", client_id=client_id, key_hmac=key_tag)
        raise IdempotencyKeyReused(record)
