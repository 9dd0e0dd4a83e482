"""A payment's attempts as the console's payment page shows them: one row per connector
account tried, oldest first (decision 0086).

Pure: a ``PaymentDetail`` in, ``AttemptRow`` values out.  The attempts that ended in a
failover come from their proof rows (``payment_attempts``: reason, proof, the account moved
to); the attempt in progress, or the last one, is the payment row itself, as in
``domain.attempts.shown_attempts``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.domain.model import Failure
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import PaymentStatus
from orchestrator.ops.payment_reads import PaymentDetail

_IN_PROGRESS = frozenset({PaymentStatus.PROCESSING.value, PaymentStatus.REQUIRES_ACTION.value})


@dataclass(frozen=True)
class AttemptRow:
    number: int
    connector_account: str
    provider: str
    provider_payment_id: str | None
    status: str
    failure: str | None  # "code / decline_code: message"
    kind: str | None  # the decline's class (card, provider); None: not known
    reason: str | None  # why it ended in a failover (provider_decline, circuit_open)
    proof: str | None
    next_connector_account: str | None
    started_at: datetime
    ended_at: datetime | None


def attempt_rows(detail: PaymentDetail, status: str) -> list[AttemptRow]:
    """Every attempt, oldest first; ``status`` is the payment's shown status (the current
    attempt's)."""
    record = detail.record
    rows = [
        AttemptRow(
            number=ended.number,
            connector_account=ended.connector_account,
            provider=ended.provider,
            provider_payment_id=ended.provider_payment_id,
            status=ended.status,
            failure=_failure_text(ended.failure),
            kind=(ended.failure or {}).get("kind"),
            reason=ended.reason,
            proof=ended.proof,
            next_connector_account=ended.next_connector_account,
            started_at=ended.started_at,
            ended_at=ended.ended_at,
        )
        for ended in detail.attempts
    ]
    started = rows[-1].ended_at if rows and rows[-1].ended_at else record.created_at
    rows.append(
        AttemptRow(
            number=record.failovers + 1,
            connector_account=record.connector_account_id or PLATFORM_ACCOUNT,
            provider=record.provider,
            provider_payment_id=record.provider_payment_id,
            status=status,
            failure=_failure_text(_document(record.failure)),
            kind=record.failure.kind if record.failure else None,
            reason=None,
            proof=None,
            next_connector_account=None,
            started_at=started,
            ended_at=None if status in _IN_PROGRESS else record.completed_at or record.updated_at,
        )
    )
    return rows


def _document(failure: Failure | None) -> dict[str, Any] | None:
    if failure is None:
        return None
    return {"code": failure.code, "decline_code": failure.decline_code, "message": failure.message}


def _failure_text(failure: dict[str, Any] | None) -> str | None:
    if not failure:
        return None
    code = str(failure.get("code") or "-")
    if failure.get("decline_code"):
        code = f"{code} / {failure['decline_code']}"
    message = failure.get("message")
    return f"{code}: {message}" if message else code
