"""The payment representation clients see (pure: record in, JSON-ready dict out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.domain.model import PaymentRecord


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def payment_representation(record: PaymentRecord) -> dict[str, Any]:
    failure = None
    if record.failure is not None:
        failure = {
            "code": record.failure.code,
            "decline_code": record.failure.decline_code,
            "message": record.failure.message,
        }
    return {
        "id": record.id,
        "object": "payment",
        "status": record.status.value,
        "amount": record.request.amount,
        "currency": record.request.currency,
        "payment_method": record.request.payment_method,
        "customer_reference": record.request.customer_reference,
        "description": record.request.description,
        "metadata": dict(record.request.metadata),
        "idempotency_key": record.idempotency_key,
        "provider": record.provider,
        "provider_payment_id": record.provider_payment_id,
        "failure": failure,
        "attempts": record.attempts,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "completed_at": iso(record.completed_at),
    }
