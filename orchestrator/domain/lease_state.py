"""The lease a record carries, as the operator's views read it (pure).

The payment row holds the charge's lease and an operation row its own; both have the same
lease columns (``Leased``) and the same two unfinished statuses (``has_ended``).
``lease_state_of`` puts an unfinished record in exactly one ``LeaseState``: the ops API,
the console and the CLI list and label leases by it, and the lease repositories'
``list_by_state`` says the same in SQL.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

# The unfinished statuses every leased table shares (payments and operations).
PROCESSING = "processing"
NEEDS_ATTENTION = "needs_attention"


class LeaseState(StrEnum):
    """Views of unfinished work by lease.

    ``active``: a holder's lease is live; ``deferred``: no holder, waiting for its
    ``next_attempt_at`` (a backoff stored for the sweeper: nobody is working on it, so it is
    not "active"); ``expired``: the lease ran out (or a deferred retry is due), the
    sweeper's next work; ``needs_attention``: parked for an operator; ``unfinished``: all
    of them.
    """

    EXPIRED = "expired"
    ACTIVE = "active"
    DEFERRED = "deferred"
    NEEDS_ATTENTION = "needs_attention"
    UNFINISHED = "unfinished"


def has_ended(status: object) -> bool:
    """Whether a record's ``status`` says its operation is over (not parked, not in work)."""
    return status not in (PROCESSING, NEEDS_ATTENTION)


class Leased(Protocol):
    """A record that carries a lease: what the engine, the lease repositories and the
    operator's views read of a payment or an operation row."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> Any: ...
    @property
    def recovery_point(self) -> Any: ...
    @property
    def lease_token(self) -> int: ...
    @property
    def lease_owner(self) -> str | None: ...
    @property
    def locked_until(self) -> datetime | None: ...
    @property
    def next_attempt_at(self) -> datetime | None: ...
    @property
    def attempts(self) -> int: ...
    @property
    def unknown_outcomes(self) -> int: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def updated_at(self) -> datetime: ...


def lease_state_of(record: Leased, now: datetime) -> LeaseState | None:
    """The one state ``record`` is listed under (None once finished)."""
    if record.status == NEEDS_ATTENTION:
        return LeaseState.NEEDS_ATTENTION
    if record.status != PROCESSING:
        return None
    if record.locked_until is None or record.locked_until <= now:
        return LeaseState.EXPIRED
    if record.next_attempt_at is not None and record.next_attempt_at > now:
        return LeaseState.DEFERRED
    return LeaseState.ACTIVE
