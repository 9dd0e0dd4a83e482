"""Refunds under chaos: real PostgreSQL, RabbitMQ, ``payorch worker`` / ``payorch sweeper``
processes and the simulator with refund faults.

Succeeded payments are refunded by merchants that over-ask on purpose: each payment gets
several refunds with distinct keys whose amounts together exceed what was captured, sent at
once, and some of them sent twice at the same moment under one key.  Meanwhile the provider
times out after refunding, saves 500s, fails list pages, answers 429s and lags, and the
suite SIGKILLs a worker holding a refund lease and SIGSTOPs another until the sweeper took
its refund over.

Then, from our books and the provider's: 0 double charges, 0 double refunds (no refund of
ours exists twice at the provider), 0 over-refunds (per payment, refunds not failed never
sum past what was captured, here and at the provider), 0 stuck (no refund left processing),
what we booked equals what the provider refunded, and the ledger balances.

Deterministic plan from a seed; chaos triggered by progress; waits end when their condition
holds; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator import SimulatorConfig, parse_fault_spec
from orchestrator.db.tables import ledger_lines, operations, payments
from tests.chaos.holders import lease_tokens, leases_held_by, wait_for_leases, wait_until
from tests.harness.stack import E2E_SETTINGS, Stack, running_stack
from tests.support.processes import ManagedProcess, ProcessManager

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

SEED = 20261201
PAYMENTS = 40
AMOUNT = 1000
LEASE_SECONDS = float(E2E_SETTINGS["lease_seconds"])
SETTLE_TIMEOUT_SECONDS = 240.0

FAULTS = (
    "refund:timeout_after_effect:0.12",
    "refund:error_500_after:0.06",
    "refund:error_500_before:0.06",
    "list_refunds:error_500_before:0.08",
    "retrieve_refund:error_500_before:0.05",
    "any:rate_limit:0.03:retry_after=1",
    "any:latency:0.15:seconds=0.4",
)
CHAOS_SETTINGS: dict[str, Any] = {
    "max_attempts": 10,
    "db_pool_size": 10,
    "db_max_overflow": 10,
    "api_threads": 20,
}


@dataclass(frozen=True)
class RefundAsk:
    payment_id: str
    key: str
    amount: int
    copies: int  # sent this many times at the same moment, one key


@dataclass(frozen=True)
class RefundAnswer:
    ask: RefundAsk
    status: int
    body: dict[str, Any]


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


def plan_refunds(payment_ids: list[str]) -> list[RefundAsk]:
    """Per payment 2-5 refunds whose amounts together exceed the captured amount about half
    the time; a third of them are double-sent."""
    rng = random.Random(SEED)
    asks = []
    for payment_id in payment_ids:
        for n in range(rng.randint(2, 5)):
            amount = rng.choice((100, 250, 300, 400, 600))
            copies = 2 if rng.random() < 0.33 else 1
            asks.append(RefundAsk(payment_id, f"{payment_id}-refund-{n}", amount, copies))
    rng.shuffle(asks)
    return asks


async def send_refunds(stack: Stack, asks: list[RefundAsk]) -> list[RefundAnswer]:
    limits = httpx.Limits(max_connections=30, max_keepalive_connections=30)
    gate = asyncio.Semaphore(30)
    async with httpx.AsyncClient(
        base_url=stack.api_url,
        headers={"Authorization": f"Bearer {stack.merchant_key}"},
        timeout=30,
        limits=limits,
        trust_env=False,
    ) as client:

        async def send(ask: RefundAsk) -> RefundAnswer:
            async with gate:
                for attempt in range(20):
                    try:
                        response = await client.post(
                            f"/v1/payments/{ask.payment_id}/refunds",
                            json={"amount": ask.amount},
                            headers={"Idempotency-Key": ask.key},
                        )
                    except httpx.TransportError:
                        await asyncio.sleep(0.1 * (attempt + 1))
                        continue
                    if response.status_code >= 500:
                        await asyncio.sleep(0.1 * (attempt + 1))
                        continue
                    return RefundAnswer(ask, response.status_code, response.json())
            raise AssertionError(f"no answer for {ask}")

        sends = [send(ask) for ask in asks for _ in range(ask.copies)]
        return list(await asyncio.gather(*sends))


def processing_refunds(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(operations)
                .where(operations.c.status == "processing")
            ).scalar_one()
        )


def kill_while_holding_a_refund(
    stack: Stack, processes: ProcessManager, worker: ManagedProcess, log: list[str]
) -> ManagedProcess:
    held = wait_for_leases(stack, worker, timeout=60, table=operations)
    worker.kill()
    log.append(f"SIGKILL {worker.name} holding operations {sorted(held)}")
    return stack.start_worker(processes, name=f"{worker.name}-replacement", concurrency=2)


def freeze_while_holding_a_refund(stack: Stack, worker: ManagedProcess, log: list[str]) -> None:
    for _ in range(5):
        wait_for_leases(stack, worker, timeout=60, table=operations)
        worker.pause()
        held = leases_held_by(stack, worker, operations)
        if not held:
            worker.resume()
            continue
        deadline = time.monotonic() + 4 * LEASE_SECONDS
        moved: list[str] = []
        while time.monotonic() < deadline:
            tokens = lease_tokens(stack, list(held), operations)
            moved = [i for i, (token, _status) in tokens.items() if token > held[i]]
            if len(moved) == len(held):
                break
            time.sleep(0.05)
        worker.resume()
        log.append(f"SIGSTOP {worker.name} holding {sorted(held)}; taken over: {moved}; SIGCONT")
        if moved:
            return
    raise AssertionError(f"no refund lease {worker.name} held was taken over while frozen")


def check_refund_invariants(stack: Stack, answers: list[RefundAnswer]) -> list[str]:
    problems: list[str] = []
    for answer in answers:
        if answer.status not in (200, 202, 409):
            problems.append(f"{answer.ask.key}: answered {answer.status} {answer.body}")
        elif answer.status == 409 and not str(answer.body.get("type")).endswith(
            "refund-exceeds-captured"
        ):
            problems.append(f"{answer.ask.key}: 409 {answer.body}")
    by_key: defaultdict[str, set[str]] = defaultdict(set)
    for answer in answers:
        if answer.status in (200, 202):
            by_key[answer.ask.key].add(answer.body["id"])
    for key, ids in by_key.items():
        if len(ids) > 1:
            problems.append(f"{key}: one key, several refunds {sorted(ids)}")

    movements = stack.simulator.admin.movements()
    at_provider = movements["refunds"]["by_refund_id"]
    refunded_at_provider: Counter[str] = Counter()
    for item in movements["refunds"]["items"]:
        if item["status"] not in ("failed", "canceled"):
            refunded_at_provider[item["payment_intent"]] += item["amount"]
    with stack.container.engine.connect() as conn:
        refunds = conn.execute(sa.select(operations)).all()
        rows = {r.id: r for r in conn.execute(sa.select(payments)).all()}
        ledger = dict(
            conn.execute(
                sa.select(ledger_lines.c.payment_id, sa.func.sum(ledger_lines.c.amount)).group_by(
                    ledger_lines.c.payment_id
                )
            ).all()
        )
    booked: Counter[str] = Counter()
    held: Counter[str] = Counter()
    for refund in refunds:
        count = int(at_provider.get(refund.id, 0))
        if count > 1:
            problems.append(f"double refund: {refund.id} exists {count} times at the provider")
        if refund.status == "processing":
            problems.append(f"stuck: {refund.id} still processing ({refund.last_error})")
        if refund.status == "succeeded":
            booked[refund.payment_id] += refund.amount
            if count != 1:
                problems.append(f"{refund.id} succeeded with {count} refunds at the provider")
        if refund.status != "failed":
            held[refund.payment_id] += refund.amount
    for payment_id, payment in rows.items():
        if stack.movements(payment_id) != 1:
            problems.append(f"{payment_id}: {stack.movements(payment_id)} charges")
        if held[payment_id] > payment.amount_captured:
            problems.append(f"over-refund: {payment_id} holds {held[payment_id]} refunded")
        if refunded_at_provider[payment.provider_payment_id] > payment.amount_captured:
            problems.append(f"over-refund at the provider: {payment_id}")
        if payment.amount_refunded != booked[payment_id]:
            problems.append(f"{payment_id}: amount_refunded {payment.amount_refunded}")
        if payment.amount_refunded != refunded_at_provider[payment.provider_payment_id]:
            problems.append(
                f"{payment_id}: booked {payment.amount_refunded}, provider refunded "
                f"{refunded_at_provider[payment.provider_payment_id]}"
            )
        if ledger.get(payment_id, 0) != 0:
            problems.append(f"{payment_id}: ledger sums to {ledger[payment_id]}")
    return problems


def test_refunds_happen_once_and_never_exceed_the_capture_through_a_kill_and_a_freeze(
    stack, processes
):
    first = stack.start_worker(processes, name="worker-a", concurrency=2)
    second = stack.start_worker(processes, name="worker-b", concurrency=2)
    stack.start_sweeper(processes)
    payment_ids = [stack.pay(f"chaos-refund-{n}", amount=AMOUNT)["id"] for n in range(PAYMENTS)]
    for payment_id in payment_ids:
        assert stack.wait_final(payment_id, timeout=120)["status"] == "succeeded"
    asks = plan_refunds(payment_ids)
    log: list[str] = [f"{len(asks)} refunds planned over {PAYMENTS} payments"]

    answers: list[RefundAnswer] = []
    errors: list[BaseException] = []

    def merchants() -> None:
        try:
            answers.extend(asyncio.run(send_refunds(stack, asks)))
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)

    thread = threading.Thread(target=merchants, name="refunding-merchants", daemon=True)
    thread.start()
    try:
        kill_while_holding_a_refund(stack, processes, first, log)
        freeze_while_holding_a_refund(stack, second, log)
    finally:
        thread.join(timeout=300)
    assert not errors, errors
    assert not thread.is_alive(), "the merchants did not finish"
    wait_until(
        "no refund processing", lambda: processing_refunds(stack) == 0, SETTLE_TIMEOUT_SECONDS
    )
    statuses = Counter(a.status for a in answers)
    faults = Counter(
        f"{r['operation']}:{r['fault']}"
        for r in stack.simulator.admin.requests()
        if r.get("fault") and "refund" in str(r.get("operation"))
    )
    log.append(f"answers {dict(statuses)}; refund faults injected {dict(faults)}")
    print("\n".join(log))

    problems = check_refund_invariants(stack, answers)
    assert problems == [], "\n".join(problems)
    assert statuses[409] > 0, "the plan over-asks: some refunds must have been refused"
    assert any(k.startswith("refund:timeout") for k in faults), "no refund timed out"
