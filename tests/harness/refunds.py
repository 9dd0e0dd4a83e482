"""Refund helpers: a succeeded payment to refund, a refund request as the API makes it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import operations
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.services.refunds import AcceptedRefund, RefundRequest, accept_refund
from tests.harness.seeds import accept, reload


def succeeded_payment(
    container: Container, client: ApiClient, key: str, *, amount: int = 1000
) -> PaymentRecord:
    """Accept a payment and charge it through the engine (the container's provider)."""
    record = accept(container, client, key, amount=amount)
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: None)
    charged = reload(container, record.id)
    assert charged.status is PaymentStatus.SUCCEEDED, charged
    return charged


def request_refund(
    container: Container,
    client: ApiClient,
    payment_id: str,
    key: str,
    *,
    amount: int | None = None,
    reason: str | None = None,
    metadata: dict[str, str] | None = None,
) -> AcceptedRefund:
    """What ``POST /v1/payments/{id}/refunds`` does, fingerprint included."""
    body: dict[str, Any] = {"amount": amount, "reason": reason, "metadata": metadata or {}}
    fingerprint = request_fingerprint("POST", f"/v1/payments/{payment_id}/refunds", body)
    return accept_refund(
        container.uow,
        container.publisher,
        container.settings,
        client,
        payment_id,
        key,
        RefundRequest(amount=amount, reason=reason, metadata=metadata or {}),
        fingerprint,
    )


def reload_operation(container: Container, operation_id: str) -> OperationRecord:
    with container.uow() as uow:
        record = uow.operations.get(operation_id)
    assert record is not None
    return record


def operation_count(container: Container, payment_id: str) -> int:
    with container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(operations)
                .where(operations.c.payment_id == payment_id)
            ).scalar_one()
        )


def force_operation(container: Container, operation_id: str, **values: Any) -> OperationRecord:
    with container.uow() as uow:
        uow.session.execute(
            operations.update().where(operations.c.id == operation_id).values(**values)
        )
        uow.commit()
    return reload_operation(container, operation_id)
