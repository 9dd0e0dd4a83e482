"""Manual-capture helpers: an authorised payment, capture and cancel requests as the API
makes them, and the ledger read per account."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines, outbox_events
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from tests.harness.seeds import accept, reload


def authorized_payment(
    container: Container, client: ApiClient, key: str, *, amount: int = 1000
) -> PaymentRecord:
    """Accept a manual-capture payment and charge it through the engine: requires_capture."""
    record = accept(container, client, key, amount=amount, capture_method="manual")
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: None)
    authorized = reload(container, record.id)
    assert authorized.status is PaymentStatus.REQUIRES_CAPTURE, authorized
    return authorized


def ledger_by_account(container: Container, payment_id: str) -> dict[str, int]:
    """Each account's sum for one payment, the account's kind only (``provider_receivable``
    for ``provider_receivable:ca_…``)."""
    totals: dict[str, int] = {}
    with container.engine.connect() as conn:
        for row in conn.execute(
            sa.select(ledger_lines.c.account, ledger_lines.c.amount).where(
                ledger_lines.c.payment_id == payment_id
            )
        ):
            kind = row.account.split(":", 1)[0]
            totals[kind] = totals.get(kind, 0) + int(row.amount)
    return totals


def capture_body(amount: int | None) -> dict[str, Any]:
    return {"amount": amount}


def capture_fingerprint(payment_id: str, amount: int | None) -> str:
    return request_fingerprint("POST", f"/v1/payments/{payment_id}/capture", capture_body(amount))


def cancel_fingerprint(payment_id: str, reason: str | None) -> str:
    return request_fingerprint("POST", f"/v1/payments/{payment_id}/cancel", {"reason": reason})


def outbox_of(container: Container, payment_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The payment's events (type, payload), in sequence order."""
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(outbox_events.c.event_type, outbox_events.c.payload)
            .where(outbox_events.c.payment_id == payment_id)
            .order_by(outbox_events.c.sequence)
        )
        return [(r.event_type, dict(r.payload)) for r in rows]
