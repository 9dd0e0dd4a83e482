"""Seeding records directly in the database, at any recovery point, for resume tests."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import (
    lease_events,
    ledger_lines,
    outbox_events,
    payment_outcomes,
    payments,
)
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.model import ApiClient, PaymentRecord, PaymentRequest, Role
from orchestrator.domain.states import Outcome, PaymentStatus
from orchestrator.services.accept import accept_payment
from orchestrator.services.api_keys import create_client

VISA = "pm_card_visa"


def new_merchant(container: Container, name: str = "merchant") -> ApiClient:
    return create_client(container.uow, name, Role.MERCHANT).client


def accept(
    container: Container,
    client: ApiClient,
    key: str,
    *,
    amount: int = 1000,
    payment_method: str = VISA,
    customer: str | None = None,
    off_session: bool | None = None,
    return_url: str | None = None,
    capture_method: str | None = None,
    currency: str = "usd",
) -> PaymentRecord:
    request = PaymentRequest(
        amount=amount,
        currency=currency,
        payment_method=payment_method,
        customer=customer,
        off_session=off_session,
        return_url=return_url,
        capture_method=capture_method or "automatic",
    )
    body: dict[str, Any] = {
        "amount": amount,
        "currency": currency,
        "payment_method": payment_method,
        "customer_reference": None,
        "description": None,
        "metadata": {},
    }
    sent = {
        "customer": customer,
        "off_session": off_session,
        "return_url": return_url,
        "capture_method": None if capture_method == "automatic" else capture_method,
    }
    body.update({name: value for name, value in sent.items() if value is not None})
    fingerprint = request_fingerprint("POST", "/v1/payments", body)
    return accept_payment(
        container.statement_uow,
        container.publisher,
        container.settings,
        client,
        key,
        request,
        fingerprint,
    ).record


def force(container: Container, payment_id: str, **values: Any) -> PaymentRecord:
    """Write columns directly (a test's way to put a record at a recovery point)."""
    with container.uow() as uow:
        uow.session.execute(payments.update().where(payments.c.id == payment_id).values(**values))
        uow.commit()
    return reload(container, payment_id)


def reload(container: Container, payment_id: str) -> PaymentRecord:
    with container.uow() as uow:
        record = uow.payments.get(payment_id)
    assert record is not None
    return record


def count_rows(container: Container, table: sa.Table, payment_id: str) -> int:
    with container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(table)
                .where(table.c.payment_id == payment_id)
            ).scalar_one()
        )


def ledger_sum(container: Container, payment_id: str | None = None) -> int:
    query = sa.select(sa.func.coalesce(sa.func.sum(ledger_lines.c.amount), 0))
    if payment_id is not None:
        query = query.where(ledger_lines.c.payment_id == payment_id)
    with container.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def outcome_rows(container: Container, payment_id: str) -> int:
    return count_rows(container, payment_outcomes, payment_id)


def outbox_types(container: Container, payment_id: str) -> list[str]:
    with container.engine.connect() as conn:
        return [
            r.event_type
            for r in conn.execute(
                sa.select(outbox_events.c.event_type).where(
                    outbox_events.c.payment_id == payment_id
                )
            )
        ]


def settle_success(container: Container, holder: PaymentRecord) -> PaymentRecord:
    """The holder recorded a successful provider answer with the token it holds: only its
    finishing write is left."""
    with container.uow() as uow:
        settled = uow.leases.record_settlement(
            holder.id,
            token=holder.lease_token,
            outcome=Outcome.SUCCEEDED,
            provider_payment_id="pi_" + holder.id,
            provider_charge_id=None,
            failure=None,
            now=uow.now(),
        )
        uow.commit()
    assert settled is not None
    return settled


def finish_with_token(container: Container, record: PaymentRecord) -> PaymentRecord | None:
    """The holder's finishing write with the token it holds (None: fenced out)."""
    with container.uow() as uow:
        finished = uow.leases.finish(
            record.id,
            token=record.lease_token,
            status=PaymentStatus.SUCCEEDED,
            response_body={},
            now=uow.now(),
        )
        uow.commit()
    return finished


def lease_history(container: Container, payment_id: str) -> list[tuple[str, int]]:
    """The payment's lease history rows (its charge's), oldest first: (event, token)."""
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(lease_events.c.event, lease_events.c.lease_token)
            .where(lease_events.c.payment_id == payment_id)
            .order_by(lease_events.c.id)
        ).all()
    return [(row.event, row.lease_token) for row in rows]
