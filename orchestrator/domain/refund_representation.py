"""The refund representation clients see (design: "Captures, cancels, refunds").

Built in its documented field order and encoded by ``encode_representation``, like the
payment's: stored answers are served as the very bytes first sent."""

from __future__ import annotations

from typing import Any

from orchestrator.domain.encoding import iso
from orchestrator.domain.operations import OperationRecord, OperationStatus

REFUND_FIELDS: tuple[str, ...] = (
    "id",
    "object",
    "payment_id",
    "amount",
    "currency",
    "reason",
    "metadata",
    "status",
    "failure",
    "provider_refund_id",
    "origin",
    "created_at",
    "completed_at",
)


def refund_representation(record: OperationRecord) -> dict[str, Any]:
    failure = None
    if record.status is OperationStatus.FAILED and record.failure_code is not None:
        failure = {"code": record.failure_code, "message": record.failure_message or ""}
    return {
        "id": record.id,
        "object": "refund",
        "payment_id": record.payment_id,
        "amount": record.amount,
        "currency": record.currency,
        "reason": record.reason,
        "metadata": dict(sorted(record.metadata.items())),
        "status": record.status.value,
        "failure": failure,
        "provider_refund_id": record.provider_object_id,
        "origin": record.origin,
        "created_at": iso(record.created_at),
        "completed_at": iso(record.completed_at),
    }
