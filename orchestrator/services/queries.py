"""Reads behind the API (scoped to the calling client)."""

from __future__ import annotations

from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, PaymentRecord


def get_payment(container: Container, client: ApiClient, payment_id: str) -> PaymentRecord | None:
    with container.uow(read_only=True) as uow:
        return uow.payments.get_for_client(client.id, payment_id)


def find_payment_by_key(
    container: Container, client: ApiClient, idempotency_key: str
) -> PaymentRecord | None:
    with container.uow(read_only=True) as uow:
        return uow.payments.find_by_key(client.id, idempotency_key)
