"""The capture and cancel representation: what ``GET /v1/captures/{id}`` and
``GET /v1/cancels/{id}`` answer, and the object of ``payment.capture_failed`` and
``payment.cancel_failed`` events.

A capture or cancel answers with the payment (``routes.captures``); this is the operation
itself, so a refused one shows why (``failure``: the provider's code and message).  Built in
its documented field order, encoded by ``encode_representation`` like the payment's."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from orchestrator.domain.encoding import encode_representation, iso
from orchestrator.domain.operations import OperationRecord, OperationStatus

OPERATION_FIELDS: tuple[str, ...] = (
    "id",
    "object",
    "payment_id",
    "amount",
    "currency",
    "reason",
    "status",
    "failure",
    "created_at",
    "completed_at",
)


def operation_representation(record: OperationRecord) -> dict[str, Any]:
    failure = None
    if record.status is OperationStatus.FAILED and record.failure_code is not None:
        failure = {"code": record.failure_code, "message": record.failure_message or ""}
    return {
        "id": record.id,
        "object": record.kind.value,
        "payment_id": record.payment_id,
        "amount": record.amount,
        "currency": record.currency,
        "reason": record.reason,
        "status": record.status.value,
        "failure": failure,
        "created_at": iso(record.created_at),
        "completed_at": iso(record.completed_at),
    }


def finished_representation(record: OperationRecord, now: datetime) -> dict[str, Any]:
    """The operation as its finish (being written at ``now``) leaves it: for its event,
    written in the finish's transaction before the row itself is updated."""
    assert record.provider_outcome is not None
    status = OperationStatus(record.provider_outcome)
    return operation_representation(replace(record, status=status, completed_at=now))


def operation_bytes(record: OperationRecord) -> bytes:
    return encode_representation(operation_representation(record))
