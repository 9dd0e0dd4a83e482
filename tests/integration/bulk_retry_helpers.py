"""Parked payments for the bulk retry tests, parked the way a worker parks them: accepted,
claimed, then ``LeaseRepository.park`` under the worker's token (the lease history's
``park`` row and ``updated_at`` as in production)."""

from __future__ import annotations

import time
from datetime import timedelta

import sqlalchemy as sa
from kombu import Connection

from orchestrator.bootstrap import Container
from orchestrator.db.tables import audit_log, payments
from orchestrator.domain.model import ApiClient, PaymentRecord
from tests.harness.seeds import accept, reload
from tests.integration.lease_helpers import PAYMENTS_QUEUE, PROCESS_PAYMENT

LEASE_SECONDS = 60.0
OUTAGE_ERROR = "8 unknown outcomes: OutcomeUnknown: read timeout"
STRIPE_KEY = "sk_test_51BulkRetryKey0000000000WXYZ"


def parked(
    container: Container, merchant: ApiClient, key: str, *, error: str = OUTAGE_ERROR
) -> PaymentRecord:
    record = accept(container, merchant, key)
    with container.uow() as uow:
        now = uow.now()
        claimed = uow.leases.claim(
            record.id,
            carried_token=record.lease_token,
            owner="worker-1",
            now=now,
            lease_until=now + timedelta(seconds=LEASE_SECONDS),
        )
        assert claimed is not None
        done = uow.leases.park(record.id, token=claimed.lease_token, error=error, now=now)
        uow.commit()
    assert done is not None
    return done


def parked_ago(container: Container, record: PaymentRecord, ago: timedelta) -> PaymentRecord:
    """Move the park ``ago`` into the past by the database's clock (an earlier outage)."""
    with container.uow() as uow:
        then = uow.now() - ago
        uow.session.execute(
            payments.update().where(payments.c.id == record.id).values(updated_at=then)
        )
        uow.commit()
    return reload(container, record.id)


def with_connector_account(container: Container, merchant: ApiClient) -> tuple[ApiClient, str]:
    """A Stripe connector account for ``merchant``, and the merchant as it is now: the
    account is its default, so its next payments run on it."""
    account = container.connector_account_service().create(
        merchant.id, provider="stripe", name="main", credentials={"api_key": STRIPE_KEY}
    )
    with container.uow() as uow:
        now_default = uow.clients.get(merchant.id)
    assert now_default is not None and now_default.default_connector_account_id == account.id
    return now_default, account.id


def audit_rows(container: Container, payment_id: str) -> list[tuple[str, str, str]]:
    """(action, actor, reason) of every audit row of ``payment_id``, oldest first."""
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor_client_id, audit_log.c.reason)
            .where(audit_log.c.payment_id == payment_id)
            .order_by(audit_log.c.id)
        ).all()
    return [(r.action, r.actor_client_id, r.reason) for r in rows]


def take_wake_ups(broker_url: str, count: int, *, timeout: float = 30.0) -> list[tuple[str, int]]:
    """Consume ``process_payment`` messages until ``count`` arrived (or ``timeout``, a
    generous bound, passed): their (payment id, token) in the order they were queued."""
    found: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    with Connection(broker_url, connect_timeout=5) as connection:
        queue = connection.SimpleQueue(PAYMENTS_QUEUE)
        try:
            while len(found) < count and time.monotonic() < deadline:
                try:
                    message = queue.get(block=True, timeout=0.5)
                except queue.Empty:
                    continue
                if message.headers.get("task") == PROCESS_PAYMENT:
                    payment_id, token = message.decode()[0][:2]
                    found.append((payment_id, int(token)))
                message.ack()
        finally:
            queue.close()
    return found
