"""A payment's attempts: one per connector account tried, in order (decision 0086).

The attempts that ended in a failover are stored (``PaymentRecord.route_attempts``, written
with their proof in the failover's fenced transaction); the attempt the payment is on now, or
ended on, is the payment row itself.  So a payment that never failed over has exactly one
attempt and nothing was written for it beyond the payment row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.domain.encoding import iso, ordered
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import PaymentStatus

# The documented field order of an attempt (docs/api/payments.md).
ATTEMPT_FIELDS: tuple[str, ...] = (
    "connector_account",
    "provider",
    "provider_payment_id",
    "status",
    "failure",
    "started_at",
    "ended_at",
)


@dataclass(frozen=True)
class EndedAttempt:
    """An attempt that ended in a failover, with its proof (a row of ``payment_attempts``)."""

    payment_id: str
    number: int
    connector_account: str
    provider: str
    provider_payment_id: str | None
    status: str
    failure: dict[str, Any] | None
    reason: str
    proof: str
    next_connector_account: str
    started_at: datetime
    ended_at: datetime


@dataclass(frozen=True)
class FailoverCount:
    """How many attempts at ``connector_account`` ended in a failover for ``reason`` in a
    window (the overview's failover rate, decision 0097)."""

    connector_account: str
    reason: str
    count: int


_IN_PROGRESS = frozenset({PaymentStatus.PROCESSING.value, PaymentStatus.REQUIRES_ACTION.value})


def failure_document(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {"code": failure.code, "decline_code": failure.decline_code, "message": failure.message}


def ended_attempt(
    record: PaymentRecord, *, failure: Failure | None, started_at: datetime, ended_at: datetime
) -> dict[str, Any]:
    """The attempt the payment is leaving for the next account: it failed, moving no money."""
    return {
        "connector_account": record.connector_account_id or PLATFORM_ACCOUNT,
        "provider": record.provider,
        "provider_payment_id": record.provider_payment_id,
        "status": PaymentStatus.FAILED.value,
        "failure": failure_document(failure),
        "started_at": iso(started_at),
        "ended_at": iso(ended_at),
    }


def current_attempt_started(record: PaymentRecord) -> datetime:
    """When the current attempt began: the last failover, else the payment's accept."""
    if record.route_attempts:
        ended = record.route_attempts[-1].get("ended_at")
        if isinstance(ended, str):
            return datetime.fromisoformat(ended)
    return record.created_at


def shown_attempts(record: PaymentRecord, status: str) -> list[dict[str, Any]]:
    """Every attempt, oldest first; ``status`` is the payment's shown status (the current
    attempt's)."""
    started = current_attempt_started(record)
    ended: str | None = None
    if status not in _IN_PROGRESS:
        ended = iso(record.completed_at or record.updated_at)
    current = {
        "connector_account": record.connector_account_id or PLATFORM_ACCOUNT,
        "provider": record.provider,
        "provider_payment_id": record.provider_payment_id,
        "status": status,
        "failure": failure_document(record.failure),
        "started_at": iso(started),
        "ended_at": ended,
    }
    return [*(ordered(dict(a), ATTEMPT_FIELDS) for a in record.route_attempts), current]
