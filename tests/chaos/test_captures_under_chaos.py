"""Captures and cancels under chaos: real PostgreSQL, RabbitMQ, ``payorch worker`` /
``payorch sweeper`` processes and the simulator with capture and cancel faults.

Authorised (manual-capture) payments are captured by merchants that double-send and race
themselves: every capture is sent twice at once under its key and raced by a second
capture under another key; some payments get a cancel that races a capture.  Meanwhile the
provider times out after capturing, saves 500s, fails reads, answers 429s and lags, and the
suite SIGKILLs a worker holding a capture or cancel lease and SIGSTOPs another until the
sweeper took its operation over.

Then, from our books and the provider's: 0 double captures (no intent captured twice),
every payment final and agreeing with the provider (succeeded = captured once, at the
amount asked; canceled = never captured), 0 stuck operations, and the ledger balanced with
its authorisation accounts released.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator import SimulatorConfig, parse_fault_spec
from orchestrator.db.tables import ledger_lines, operations, payments
from tests.chaos.holders import wait_until
from tests.chaos.test_refunds_under_chaos import (
    CHAOS_SETTINGS,
    freeze_while_holding_a_refund,
    kill_while_holding_a_refund,
    processing_refunds,
)
from tests.harness.stack import Stack, running_stack

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

SEED = 20261202
PAYMENTS = 40
AMOUNT = 1000
SETTLE_TIMEOUT_SECONDS = 240.0

FAULTS = (
    "capture:timeout_after_effect:0.15",
    "capture:error_500_after:0.08",
    "capture:error_500_before:0.08",
    "cancel:timeout_after_effect:0.15",
    "cancel:error_500_after:0.08",
    "retrieve:error_500_before:0.05",
    "any:rate_limit:0.03:retry_after=1",
    "any:latency:0.3:seconds=0.4",
)


@dataclass(frozen=True)
class Ask:
    payment_id: str
    action: str  # capture | cancel
    key: str
    body: dict[str, Any]
    copies: int  # sent this many times at the same moment, one key


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    simulator = SimulatorConfig(
        seed=SEED,
        faults=tuple(parse_fault_spec(spec) for spec in FAULTS),
        stall_seconds=4.0,  # held answers outlast the 1.5 s provider timeout
    )
    with running_stack(
        make_postgres_database(), make_broker_url(), simulator_config=simulator, **CHAOS_SETTINGS
    ) as built:
        yield built


def plan(payment_ids: list[str]) -> tuple[list[Ask], dict[str, int]]:
    """Per payment a capture (double-sent) raced by a capture under another key; every
    fourth payment a cancel (double-sent) racing a capture instead.  Returns the asks and
    the amount every capture of a payment asks for."""
    rng = random.Random(SEED)
    asks: list[Ask] = []
    amounts: dict[str, int] = {}
    for n, payment_id in enumerate(payment_ids):
        take = rng.choice((300, 700, 1000))
        amounts[payment_id] = take
        first = Ask(payment_id, "capture", f"{payment_id}-capture-a", {"amount": take}, 2)
        if n % 4 == 3:
            first = Ask(payment_id, "cancel", f"{payment_id}-cancel", {}, 2)
        asks += [first, Ask(payment_id, "capture", f"{payment_id}-capture-b", {"amount": take}, 1)]
    rng.shuffle(asks)
    return asks, amounts


async def send(stack: Stack, asks: list[Ask]) -> list[tuple[Ask, int, dict[str, Any]]]:
    limits = httpx.Limits(max_connections=30, max_keepalive_connections=30)
    gate = asyncio.Semaphore(30)
    async with httpx.AsyncClient(
        base_url=stack.api_url,
        headers={"Authorization": f"Bearer {stack.merchant_key}"},
        timeout=30,
        limits=limits,
        trust_env=False,
    ) as client:

        async def one(ask: Ask) -> tuple[Ask, int, dict[str, Any]]:
            async with gate:
                for attempt in range(20):
                    try:
                        response = await client.post(
                            f"/v1/payments/{ask.payment_id}/{ask.action}",
                            json=ask.body,
                            headers={"Idempotency-Key": ask.key},
                        )
                    except httpx.TransportError:
                        await asyncio.sleep(0.1 * (attempt + 1))
                        continue
                    if response.status_code >= 500:
                        await asyncio.sleep(0.1 * (attempt + 1))
                        continue
                    return ask, response.status_code, response.json()
            raise AssertionError(f"no answer for {ask}")

        return list(await asyncio.gather(*(one(a) for a in asks for _ in range(a.copies))))


def wait_authorized(stack: Stack, payment_id: str) -> None:
    wait_until(
        f"{payment_id} requires_capture",
        lambda: stack.payment(payment_id)["status"] == "requires_capture",
        120,
    )


def check_invariants(
    stack: Stack, answers: list[tuple[Ask, int, dict[str, Any]]], amounts: dict[str, int]
) -> list[str]:
    problems: list[str] = []
    allowed = ("operation-in-progress", "payment-not-capturable", "payment-not-cancelable")
    for ask, status, body in answers:
        if status == 409 and not str(body.get("type")).endswith(allowed):
            problems.append(f"{ask.key}: 409 {body}")
        elif status not in (200, 202, 409):
            problems.append(f"{ask.key}: answered {status} {body}")
    movements = stack.simulator.admin.movements()
    captured_at_provider: dict[str, int] = movements["captures"]["by_record"]
    with stack.container.engine.connect() as conn:
        rows = {
            r.id: r
            for r in conn.execute(sa.select(payments).where(payments.c.id.in_(list(amounts)))).all()
        }
        unfinished = conn.execute(
            sa.select(operations.c.id, operations.c.status).where(
                operations.c.status.not_in(["succeeded", "failed"])
            )
        ).all()
        ledger: dict[str, dict[str, int]] = {}
        for line in conn.execute(sa.select(ledger_lines)).all():
            kind = line.account.split(":", 1)[0]
            totals = ledger.setdefault(line.payment_id, {})
            totals[kind] = totals.get(kind, 0) + int(line.amount)
    problems += [f"stuck: {op.id} {op.status}" for op in unfinished]
    for payment_id, row in rows.items():
        times = int(captured_at_provider.get(payment_id, 0))
        if times > 1:
            problems.append(f"double capture: {payment_id} captured {times} times")
        if stack.movements(payment_id) != 1:
            problems.append(f"{payment_id}: {stack.movements(payment_id)} authorisations")
        if row.status == "succeeded":
            if times != 1 or row.amount_captured != amounts[payment_id]:
                problems.append(
                    f"{payment_id}: succeeded with {row.amount_captured} captured, {times}x "
                    f"at the provider (asked {amounts[payment_id]})"
                )
        elif row.status == "canceled":
            if times:
                problems.append(f"{payment_id}: canceled but captured at the provider")
        else:
            problems.append(f"{payment_id}: ended {row.status}")
        totals = ledger.get(payment_id, {})
        if sum(totals.values()) != 0:
            problems.append(f"{payment_id}: ledger sums to {sum(totals.values())}")
        held = totals.get("provider_authorized", 0), totals.get("merchant_authorized", 0)
        if held != (0, 0):
            problems.append(f"{payment_id}: authorisation not released {held}")
        if totals.get("merchant_payable", 0) != -row.amount_captured:
            problems.append(f"{payment_id}: ledger payable {totals} vs {row.amount_captured}")
    return problems


def test_captures_happen_once_at_their_amount_through_races_a_kill_and_a_freeze(stack, processes):
    first = stack.start_worker(processes, name="worker-a", concurrency=2)
    second = stack.start_worker(processes, name="worker-b", concurrency=2)
    stack.start_sweeper(processes)
    payment_ids = [
        stack.pay(f"chaos-capture-{n}", amount=AMOUNT, capture_method="manual")["id"]
        for n in range(PAYMENTS)
    ]
    for payment_id in payment_ids:
        wait_authorized(stack, payment_id)
    asks, amounts = plan(payment_ids)
    log: list[str] = [f"{len(asks)} captures and cancels planned over {PAYMENTS} payments"]

    answers: list[tuple[Ask, int, dict[str, Any]]] = []
    errors: list[BaseException] = []

    def merchants() -> None:
        try:
            answers.extend(asyncio.run(send(stack, asks)))
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)

    thread = threading.Thread(target=merchants, name="capturing-merchants", daemon=True)
    thread.start()
    try:
        kill_while_holding_a_refund(stack, processes, first, log)
        freeze_while_holding_a_refund(stack, second, log)
    finally:
        thread.join(timeout=300)
    assert not errors, errors
    assert not thread.is_alive(), "the merchants did not finish"
    wait_until(
        "no operation processing", lambda: processing_refunds(stack) == 0, SETTLE_TIMEOUT_SECONDS
    )
    statuses = Counter(status for _ask, status, _body in answers)
    faults = Counter(
        f"{r['operation']}:{r['fault']}"
        for r in stack.simulator.admin.requests()
        if r.get("fault") and r.get("operation") in ("capture", "cancel")
    )
    log.append(f"answers {dict(statuses)}; capture/cancel faults injected {dict(faults)}")
    print("\n".join(log))

    problems = check_invariants(stack, answers, amounts)
    assert problems == [], "\n".join(problems)
    assert statuses[409] > 0, "every payment is raced: some requests must have been refused"
    assert any(k.startswith("capture:timeout") for k in faults), "no capture timed out"
