"""The demo's capture round: after the refunds, manual-capture payments are authorised, then
captured (70 % of each) or canceled, with every capture sent twice at once under its key
and raced by a second capture under another key (exactly one may start: the rest is 409),
while the provider times out after capturing and saves 500s for part of them.

The verdict comes from the database and the provider's own books: captures issued, refused,
cancels, double captures (an intent captured twice at the provider: must be 0), wrong
amounts and stuck operations (must be 0)."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import operations, outbox_events, payments

# Faults armed for the round (the simulator's rule syntax).
CAPTURE_FAULTS = (
    "capture:timeout_after_effect:0.3",
    "capture:error_500_after:0.2",
    "cancel:timeout_after_effect:0.3",
)
CANCEL_EVERY = 4  # every fourth authorised payment is canceled instead
CAPTURED_SHARE = 70  # percent of the authorisation a capture takes
SETTLE_SECONDS = 60.0
AMOUNT_BASE = 4100


@dataclass
class CaptureTally:
    authorized: int = 0
    requested: int = 0  # capture and cancel requests sent (with the doubles and the races)
    refused: int = 0  # 409: the race's loser (expected)
    captured: int = 0
    canceled: int = 0
    double_captures: int = 0  # must be 0
    wrong_amounts: int = 0  # must be 0
    stuck: int = 0  # must be 0
    events: int = 0  # merchant events the round's payments wrote
    violations: list[str] = field(default_factory=list)


def capture_round(
    container: Container, api_url: str, api_key: str, count: int, movements_of: Any, admin: Any
) -> CaptureTally:
    """``movements_of()`` reads the simulator's books; ``admin`` arms its faults."""
    tally = CaptureTally()
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=api_url, headers=headers, timeout=30) as client:
        ids = [_authorize(client, n) for n in range(count)]
        authorized = _wait_for(client, ids, "requires_capture", tally)
    tally.authorized = len(authorized)
    for spec in CAPTURE_FAULTS:
        admin.add_fault(spec)
    asks: list[tuple[str, str, str, dict[str, Any]]] = []
    expected: dict[str, tuple[str, int]] = {}
    for n, (payment_id, amount) in enumerate(authorized):
        if n % CANCEL_EVERY == CANCEL_EVERY - 1:
            body = {"reason": "requested_by_customer"}
            asks += [(payment_id, "cancel", f"demo-cancel-{payment_id}", body)] * 2
            expected[payment_id] = ("canceled", 0)
        else:
            take = amount * CAPTURED_SHARE // 100
            asks += [(payment_id, "capture", f"demo-capture-{payment_id}", {"amount": take})] * 2
            # The race: another key for the same payment, at the same time.
            asks.append((payment_id, "capture", f"demo-capture-{payment_id}-b", {"amount": take}))
            expected[payment_id] = ("succeeded", take)

    def send(ask: tuple[str, str, str, dict[str, Any]]) -> int:
        payment_id, action, key, body = ask
        with httpx.Client(base_url=api_url, headers=headers, timeout=30) as client:
            for _ in range(10):
                response = client.post(
                    f"/v1/payments/{payment_id}/{action}",
                    json=body,
                    headers={"Idempotency-Key": key},
                )
                if response.status_code < 500:
                    return response.status_code
                time.sleep(0.2)
            return response.status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        statuses = Counter(pool.map(send, asks))
    tally.requested = len(asks)
    tally.refused = statuses[409]
    unexpected = {s: n for s, n in statuses.items() if s not in (200, 202, 409)}
    if unexpected:
        tally.violations.append(f"capture/cancel requests answered {unexpected}")
    _settle(container)
    _judge(container, movements_of(), expected, tally)
    return tally


def _authorize(client: httpx.Client, n: int) -> str:
    body = {
        "amount": AMOUNT_BASE + n,
        "currency": "usd",
        "payment_method": "pm_card_visa",
        "capture_method": "manual",
    }
    for _ in range(10):
        response = client.post(
            "/v1/payments", json=body, headers={"Idempotency-Key": f"demo-manual-{n}"}
        )
        if response.status_code in (200, 202):
            return str(response.json()["id"])
        time.sleep(0.2)
    raise RuntimeError(f"a manual payment was not accepted: {response.status_code}")


def _wait_for(
    client: httpx.Client, ids: list[str], status: str, tally: CaptureTally
) -> list[tuple[str, int]]:
    deadline = time.monotonic() + SETTLE_SECONDS
    reached: dict[str, int] = {}
    while len(reached) < len(ids) and time.monotonic() < deadline:
        for payment_id in ids:
            if payment_id in reached:
                continue
            shown = client.get(f"/v1/payments/{payment_id}")
            if shown.status_code == 200 and shown.json()["status"] == status:
                reached[payment_id] = int(shown.json()["amount_capturable"])
        time.sleep(0.2)
    for payment_id in ids:
        if payment_id not in reached:
            tally.violations.append(f"manual payment {payment_id} never reached {status}")
    return [(p, reached[p]) for p in ids if p in reached]


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


def _judge(
    container: Container,
    movements: dict[str, Any],
    expected: dict[str, tuple[str, int]],
    tally: CaptureTally,
) -> None:
    captures: dict[str, int] = movements.get("captures", {}).get("by_record", {})
    with container.engine.connect() as conn:
        rows = {
            r.id: r
            for r in conn.execute(
                sa.select(payments).where(payments.c.id.in_(list(expected)))
            ).all()
        }
        ops = conn.execute(
            sa.select(operations.c.id, operations.c.status).where(
                operations.c.payment_id.in_(list(expected)),
                operations.c.kind.in_(["capture", "cancel"]),
            )
        ).all()
        tally.events = int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(outbox_events)
                .where(outbox_events.c.payment_id.in_(list(expected)))
            ).scalar_one()
        )
    for op in ops:
        if op.status not in ("succeeded", "failed"):
            tally.stuck += 1
            tally.violations.append(f"operation {op.id} ended {op.status}")
    for payment_id, (status, amount) in expected.items():
        row = rows[payment_id]
        at_provider = int(captures.get(payment_id, 0))
        if at_provider > 1:
            tally.double_captures += at_provider - 1
            tally.violations.append(f"{payment_id} was captured {at_provider} times")
        if row.status != status:
            tally.violations.append(f"{payment_id} ended {row.status}, expected {status}")
            continue
        if status == "succeeded":
            tally.captured += 1
            if row.amount_captured != amount or at_provider != 1:
                tally.wrong_amounts += 1
                tally.violations.append(
                    f"{payment_id} captured {row.amount_captured} ({at_provider}x at the "
                    f"provider), expected {amount} once"
                )
        else:
            tally.canceled += 1
            if at_provider:
                tally.violations.append(f"{payment_id} canceled but captured at the provider")
