"""The demo's refund round: after the storm, refund some succeeded payments, over-asking on
purpose (three refunds of 40 % each, sent at once with distinct keys: one must be refused),
with a provider that times out after refunding and saves 500s for part of them.

The verdict comes from the database and the provider's own books: refunds issued, refused,
double refunds (a refund of ours that exists twice at the provider) and over-refunds (a
payment whose refunds not failed sum past what was captured, here or at the provider)."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import operations, payments

# Faults armed for the round (the simulator's rule syntax).
REFUND_FAULTS = ("refund:timeout_after_effect:0.2", "refund:error_500_after:0.1")
SHARE_REFUNDED = 4  # every fourth succeeded payment
SETTLE_SECONDS = 60.0


@dataclass
class RefundTally:
    requested: int = 0
    accepted: int = 0
    refused: int = 0  # 409 refund-exceeds-captured (expected: the round over-asks)
    succeeded: int = 0
    failed: int = 0
    double_refunds: int = 0  # must be 0
    over_refunds: int = 0  # must be 0
    stuck: int = 0  # must be 0
    violations: list[str] = field(default_factory=list)


def refund_round(
    container: Container, api_url: str, api_key: str, movements_of: Any, admin: Any
) -> RefundTally:
    """``movements_of()`` reads the simulator's books; ``admin`` arms its faults."""
    tally = RefundTally()
    with container.engine.connect() as conn:
        paid = conn.execute(
            sa.select(payments.c.id, payments.c.amount_captured)
            .where(payments.c.status == "succeeded")
            # Stripe payments only: an Adyen refund settles by notification, which this
            # round's synchronous tally does not wait for.
            .where(payments.c.connector_account_id.is_(None))
            .order_by(payments.c.created_at)
        ).all()
    chosen = paid[::SHARE_REFUNDED]
    for spec in REFUND_FAULTS:
        admin.add_fault(spec)
    asks = [
        (row.id, f"demo-refund-{row.id}-{n}", max(1, row.amount_captured * 40 // 100))
        for row in chosen
        for n in range(3)
    ]

    def send(ask: tuple[str, str, int]) -> int:
        payment_id, key, amount = ask
        with httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
        ) as client:
            for _ in range(10):
                response = client.post(
                    f"/v1/payments/{payment_id}/refunds",
                    json={"amount": amount, "reason": "requested_by_customer"},
                    headers={"Idempotency-Key": key},
                )
                if response.status_code < 500:
                    return response.status_code
                time.sleep(0.2)
            return response.status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = Counter(pool.map(send, asks))
    tally.requested = len(asks)
    tally.accepted = statuses[202] + statuses[200]
    tally.refused = statuses[409]
    unexpected = {s: n for s, n in statuses.items() if s not in (200, 202, 409)}
    if unexpected:
        tally.violations.append(f"refund requests answered {unexpected}")
    _settle(container)
    _judge(container, movements_of(), tally)
    return tally


def _settle(container: Container) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        with container.engine.connect() as conn:
            left = conn.execute(
                sa.select(sa.func.count())
                .select_from(operations)
                .where(operations.c.status == "processing")
            ).scalar_one()
        if left == 0:
            return
        time.sleep(0.3)


def _judge(container: Container, movements: dict[str, Any], tally: RefundTally) -> None:
    refunds_at_provider = movements.get("refunds", {})
    by_refund_id: dict[str, int] = refunds_at_provider.get("by_refund_id", {})
    refunded_by_intent: Counter[str] = Counter()
    for item in refunds_at_provider.get("items", []):
        if item.get("status") not in ("failed", "canceled"):
            refunded_by_intent[item["payment_intent"]] += item["amount"]
    with container.engine.connect() as conn:
        ours = conn.execute(sa.select(operations).where(operations.c.kind == "refund")).all()
        rows = {r.id: r for r in conn.execute(sa.select(payments)).all()}
    held: Counter[str] = Counter()
    for refund in ours:
        copies = int(by_refund_id.get(refund.id, 0))
        if copies > 1:
            tally.double_refunds += copies - 1
            tally.violations.append(f"refund {refund.id} exists {copies} times at the provider")
        if refund.status == "succeeded":
            tally.succeeded += 1
        elif refund.status == "failed":
            tally.failed += 1
        else:
            tally.stuck += 1
            tally.violations.append(f"refund {refund.id} ended {refund.status}")
        if refund.status != "failed":
            held[refund.payment_id] += refund.amount
    for payment_id, amount in held.items():
        payment = rows[payment_id]
        at_provider = refunded_by_intent[payment.provider_payment_id]
        if amount > payment.amount_captured or at_provider > payment.amount_captured:
            tally.over_refunds += 1
            tally.violations.append(f"{payment_id} refunded past what was captured")
