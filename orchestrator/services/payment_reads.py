"""Reads behind the API (scoped to the calling client).  Both only read: the composition
root hands them a read-only unit of work (``Container.read_only_uow``)."""

from __future__ import annotations

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.model import ApiClient, PaymentRecord


def get_payment(
    read_only_uow: UnitOfWorkFactory, client: ApiClient, payment_id: str
) -> PaymentRecord | None:
    with read_only_uow() as uow:
        return uow.payments.get_for_client(client.id, payment_id)


def find_payment_by_key(
    read_only_uow: UnitOfWorkFactory, client: ApiClient, idempotency_key: str
) -> PaymentRecord | None:
    with read_only_uow() as uow:
        return uow.payments.find_by_key(client.id, idempotency_key)
