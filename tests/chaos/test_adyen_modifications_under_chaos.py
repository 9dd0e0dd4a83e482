"""Adyen captures and refunds under chaos (issue 39): real PostgreSQL, real RabbitMQ, real
``payorch worker`` and ``payorch sweeper`` processes, the API, and the Adyen simulator with
faults, its signed notifications delivered to the API.

Manual-capture EUR payments are authorised, then captured in part and refunded in part
through the API.  Every capture and refund is sent 1-3 times under its key, some sends at
the same moment; some payments get a second capture under another key racing the first, and
some refunds together ask for more than was captured.  Adyen's modifications are
asynchronous: each answers ``received``, and its CAPTURE / REFUND notification, stored by
payorch, settles the operation (decision 0072).  Meanwhile:

    one payment's capture is done at Adyen and its answer held back: the worker that sent
        it is SIGKILLed in that window (answer not recorded), a replacement started
    another's capture lags at Adyen: the worker holding it is SIGSTOPped until the sweeper's
        takeover finished the capture elsewhere, then SIGCONTed (its late writes fenced out)

and Adyen times out after capturing and after refunding, saves 500s after a capture or a
refund, and duplicates and reorders its notifications.

Then, counted at the simulator's own books: 0 payments captured twice (one capture per
payment, per capture operation, within what was authorised), 0 refunds executed twice (one
refund per refund operation; per payment within what was captured), every operation final
(0 stuck), each refused request a 409 that says why, our records and ledger agreeing with
Adyen, and every notification delivered and stored once, for its payment.

Deterministic by construction, as the other chaos files: a seeded plan, chaos triggered by
the progress of chosen operations, waits that end when their condition holds.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    RunningAdyenSimulator,
    parse_fault_spec,
    start_in_thread,
)
from orchestrator.db.tables import ledger_lines, operations, payments, provider_events
from tests.chaos.books import AdyenBooks
from tests.chaos.holders import FROZEN_CONSUMER_SECONDS, freeze_while_holding, wait_until
from tests.chaos.test_adyen_under_chaos import CHAOS_SETTINGS, LEASE_SECONDS, holder
from tests.harness.stack import Stack, running_stack, wait_for_output
from tests.integration.adyen_simulator_helpers import API_KEY, MERCHANT
from tests.integration.test_adyen_modifications_end_to_end import adyen_account
from tests.replay.adyen_schema import AdyenWatch
from tests.support.processes import ManagedProcess, ProcessManager

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

SEED = 20261206
PAYMENTS = 30
AUTHORISED = 5000
# Capture amounts of the plan; the chaos is aimed by amounts no other capture asks for.
CAPTURE_AMOUNTS = (1500, 2500, 4000, 5000)
KILL_AT, KILL_AMOUNT = 3, 4321
FREEZE_AT, FREEZE_AMOUNT = 17, 4322
SETTLE_TIMEOUT_SECONDS = 180.0
SUCCEEDING_CARD = "8415718415172200"

FAULTS = (
    # The kill's capture: done, then its answer held back past the worker's timeout; its
    # next replays fail before reaching Adyen, so nothing records the answer before the kill.
    f"capture:timeout_after_effect:amounts={KILL_AMOUNT}:times=1",
    f"capture:error_500_before:amounts={KILL_AMOUNT}:times=3",
    # The freeze's capture lags while its key is held, so its holder is frozen mid-call.
    f"capture:latency:amounts={FREEZE_AMOUNT}:seconds=3:times=1",
    # Each kind of lost answer at least once (the first request it can hit), then drawn.
    "capture:timeout_after_effect:times=1",
    "capture:error_500_after:times=1",
    "refund:timeout_after_effect:times=1",
    "refund:error_500_after:times=1",
    "capture:timeout_after_effect:0.15",
    "capture:error_500_after:0.1",
    "refund:timeout_after_effect:0.15",
    "refund:error_500_after:0.1",
    "webhook:duplicate:0.3",
    "webhook:reorder:0.2",
)
CAPTURE_REFUSALS = ("operation-in-progress", "payment-not-capturable")
REFUND_REFUSALS = ("refund-exceeds-captured",)


@dataclass(frozen=True)
class Ask:
    payment_id: str
    action: str  # capture | refunds (the path's last part)
    key: str
    amount: int
    sends: int  # this many sends under the key
    together: int  # of which this many at the same moment, the rest one after another


@dataclass(frozen=True)
class Answer:
    ask: Ask
    status: int
    body: dict[str, Any]
    operation_id: str | None  # the capture's (Operation-Id) or the refund's id


@pytest.fixture
def adyen() -> Iterator[RunningAdyenSimulator]:
    watch = AdyenWatch()
    config = AdyenSimulatorConfig(
        seed=SEED,
        faults=tuple(parse_fault_spec(spec) for spec in FAULTS),
        # Held answers outlast the 1.5 s provider timeout: the worker sees a timeout.
        stall_seconds=4.0,
        api_keys=(API_KEY,),
        merchant_accounts=(MERCHANT,),
        answer_observer=watch,
    )
    with start_in_thread(config) as simulator:
        yield simulator
    # Every answer the workers saw must be one the real Adyen could send.
    watch.assert_clean()


@pytest.fixture
def stack(make_postgres_database, make_broker_url, adyen) -> Iterator[Stack]:
    with running_stack(
        make_postgres_database(), make_broker_url(), adyen_api_base=adyen.url, **CHAOS_SETTINGS
    ) as built:
        yield built


def plan_captures(payment_ids: list[str]) -> list[Ask]:
    """A capture per payment, sent 1-3 times; every fourth payment also a second capture
    under another key, racing the first (one of them must be refused).  The kill's and the
    freeze's payments get their own amounts, sent once."""
    rng = random.Random(f"{SEED}:captures")
    asks = []
    for n, payment_id in enumerate(payment_ids):
        amount = {KILL_AT: KILL_AMOUNT, FREEZE_AT: FREEZE_AMOUNT}.get(n)
        if amount is not None:
            asks.append(Ask(payment_id, "capture", f"{payment_id}-capture-a", amount, 1, 1))
            continue
        amount = rng.choice(CAPTURE_AMOUNTS)
        sends = rng.randint(1, 3)
        together = rng.randint(1, sends)
        asks.append(Ask(payment_id, "capture", f"{payment_id}-capture-a", amount, sends, together))
        if n % 4 == 1:
            asks.append(Ask(payment_id, "capture", f"{payment_id}-capture-b", amount, 1, 1))
    return asks


def plan_refunds(captured: dict[str, int]) -> list[Ask]:
    """1-2 refunds per captured payment, sent 1-3 times; about a third of the pairs ask
    together for more than was captured (one of them must be refused)."""
    rng = random.Random(f"{SEED}:refunds")
    asks = []
    for payment_id, amount in sorted(captured.items()):
        for n in range(rng.randint(1, 2)):
            part = rng.choice((amount // 5, amount // 2, amount * 3 // 5))
            sends = rng.randint(1, 3)
            key = f"{payment_id}-refund-{n}"
            asks.append(Ask(payment_id, "refunds", key, part, sends, rng.randint(1, sends)))
    return asks


async def send(stack: Stack, asks: list[Ask]) -> list[Answer]:
    """Every ask, all at once: its ``together`` sends at the same moment, the rest after a
    pause each.  A send is retried as a careful client retries (5xx, connection errors)."""
    rng = random.Random(f"{SEED}:sends")
    pauses = {ask.key: [rng.uniform(0.05, 1.0) for _ in range(ask.sends)] for ask in asks}
    limits = httpx.Limits(max_connections=30, max_keepalive_connections=30)
    gate = asyncio.Semaphore(30)
    async with httpx.AsyncClient(
        base_url=stack.api_url,
        headers={"Authorization": f"Bearer {stack.merchant_key}"},
        timeout=30,
        limits=limits,
        trust_env=False,
    ) as client:

        async def once(ask: Ask) -> Answer:
            for attempt in range(40):
                try:
                    async with gate:
                        response = await client.post(
                            f"/v1/payments/{ask.payment_id}/{ask.action}",
                            json={"amount": ask.amount},
                            headers={"Idempotency-Key": ask.key},
                        )
                except httpx.TransportError:
                    await asyncio.sleep(min(2.0, 0.1 * (attempt + 1)))
                    continue
                if response.status_code >= 500:
                    await asyncio.sleep(min(2.0, 0.1 * (attempt + 1)))
                    continue
                body = response.json()
                named = response.headers.get("Operation-Id")
                if ask.action == "refunds" and response.status_code in (200, 202):
                    named = str(body["id"])
                return Answer(ask, response.status_code, body, named)
            raise AssertionError(f"no answer for {ask}")

        async def all_sends(ask: Ask) -> list[Answer]:
            answers = list(await asyncio.gather(*(once(ask) for _ in range(ask.together))))
            for pause in pauses[ask.key][ask.together :]:
                await asyncio.sleep(pause)
                answers.append(await once(ask))
            return answers

        done = await asyncio.gather(*(all_sends(ask) for ask in asks))
    return [answer for answers in done for answer in answers]


class InBackground:
    """Sends ``asks`` from a thread (the API runs in this process); ``result()`` joins."""

    def __init__(self, stack: Stack, asks: list[Ask]) -> None:
        self._answers: list[Answer] = []
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run, args=(stack, asks), name="merchants", daemon=True
        )
        self._thread.start()

    def _run(self, stack: Stack, asks: list[Ask]) -> None:
        try:
            self._answers = asyncio.run(send(stack, asks))
        except BaseException as error:  # re-raised in the test's thread
            self._errors.append(error)

    def result(self, timeout: float) -> list[Answer]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the merchants did not finish within {timeout}s"
        if self._errors:
            raise self._errors[0]
        return self._answers


def operation_of(stack: Stack, payment_id: str, kind: str) -> dict[str, Any] | None:
    """The payment's (only) ``kind`` operation, once accepted."""
    with stack.container.engine.connect() as conn:
        row = conn.execute(
            sa.select(operations).where(
                operations.c.payment_id == payment_id, operations.c.kind == kind
            )
        ).first()
    return dict(row._mapping) if row is not None else None


def wait_for_operation(stack: Stack, payment_id: str, kind: str) -> dict[str, Any]:
    found: dict[str, Any] | None = None

    def accepted() -> bool:
        nonlocal found
        found = operation_of(stack, payment_id, kind)
        return found is not None

    wait_until(f"{payment_id}'s {kind} accepted", accepted, timeout=120)
    assert found is not None
    return found


def kill_after_the_capture(
    stack: Stack,
    adyen: RunningAdyenSimulator,
    workers: list[ManagedProcess],
    payment_id: str,
    log: list[str],
) -> ManagedProcess:
    """SIGKILL the worker that sent ``payment_id``'s capture once Adyen has captured it,
    before its answer is recorded; return the killed worker."""
    operation_id = str(wait_for_operation(stack, payment_id, "capture")["id"])
    sender: str | None = None

    def captured() -> bool:
        nonlocal sender
        operation = operation_of(stack, payment_id, "capture")
        assert operation is not None
        sender = operation["lease_owner"] or sender
        return payment_id in adyen.admin.movements()["captures"]["by_reference"]

    wait_until(f"Adyen to capture {payment_id}", captured, timeout=120)
    victim = holder(workers, sender)
    assert victim is not None, f"no running worker holds {operation_id} ({sender})"
    victim.kill()
    operation = operation_of(stack, payment_id, "capture")
    assert operation is not None
    seen = (operation["status"], operation["unknown_outcomes"], stack.payment(payment_id))
    # What makes this the kill it claims to be: Adyen acted, payorch had not recorded it.
    assert seen[:2] == ("processing", 0), seen
    assert seen[2]["amount_captured"] == 0, seen
    log.append(f"SIGKILL {victim.name} (pid {victim.pid}): {operation_id} captured, not recorded")
    return victim


def freeze_past_the_lease(
    stack: Stack, workers: list[ManagedProcess], payment_id: str, log: list[str]
) -> ManagedProcess:
    """SIGSTOP the worker holding ``payment_id``'s capture while the call is open at Adyen,
    until another worker took the lease over and finished the capture; SIGCONT; return it."""
    wait_for_operation(stack, payment_id, "capture")

    def capture() -> dict[str, Any]:
        operation = operation_of(stack, payment_id, "capture")
        assert operation is not None
        return operation

    def calling(operation: dict[str, Any]) -> ManagedProcess | None:
        if operation["status"] != "processing" or operation["step_attempts"] < 1:
            return None
        return holder(workers, operation["lease_owner"])

    victim, held = freeze_while_holding(
        f"{payment_id}'s capture to be sent", capture, calling, timeout=120
    )
    try:

        def finished_elsewhere() -> bool:
            operation = capture()
            moved = int(operation["lease_token"]) > int(held["lease_token"])
            return moved and operation["status"] in ("succeeded", "failed")

        # The lease expires, the sweeper hands the capture to another worker, whose replay
        # of the same key reads Adyen's answer, and the notification settles it.
        wait_until(
            f"{held['id']} taken over and finished",
            finished_elsewhere,
            8 * LEASE_SECONDS + FROZEN_CONSUMER_SECONDS + 60,
        )
    finally:
        victim.resume()
    log.append(f"SIGSTOP {victim.name} (pid {victim.pid}) holding {held['id']} past its lease")
    return victim


def authorised(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(payments.c.status == "requires_capture")
            ).scalar_one()
        )


def unfinished_operations(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(operations)
                .where(operations.c.status.not_in(["succeeded", "failed"]))
            ).scalar_one()
        )


def all_delivered(adyen: RunningAdyenSimulator) -> bool:
    delivered = {
        (d["pspReference"], d["eventCode"])
        for d in adyen.admin.notification_deliveries()
        if d["outcome"] == "delivered"
    }
    return all(
        (i["pspReference"], i["eventCode"]) in delivered for i in adyen.admin.notification_items()
    )


def check_answers(answers: list[Answer], problems: defaultdict[str, list[str]]) -> None:
    """Each send answered 200/202 naming its key's one operation, or 409 saying why."""
    named: defaultdict[str, set[str]] = defaultdict(set)
    for answer in answers:
        ask, status = answer.ask, answer.status
        allowed = CAPTURE_REFUSALS if ask.action == "capture" else REFUND_REFUSALS
        if status == 409 and not str(answer.body.get("type")).endswith(allowed):
            problems[ask.payment_id].append(f"{ask.key}: 409 {answer.body}")
        elif status not in (200, 202, 409):
            problems[ask.payment_id].append(f"{ask.key}: answered {status} {answer.body}")
        elif status != 409:
            named[ask.key].add(str(answer.operation_id))
    for ask in {answer.ask for answer in answers}:
        if len(named[ask.key]) > 1:
            problems[ask.payment_id].append(f"{ask.key}: one key, operations {named[ask.key]}")


def check_books(
    stack: Stack, books: AdyenBooks, payment_ids: list[str], problems: defaultdict[str, list[str]]
) -> None:
    """Our operations, records and ledger against Adyen's own books."""
    with stack.container.engine.connect() as conn:
        ops = list(conn.execute(sa.select(operations)).all())
        records = {
            row.id: row
            for row in conn.execute(sa.select(payments).where(payments.c.id.in_(payment_ids)))
        }
        ledger: defaultdict[str, Counter[str]] = defaultdict(Counter)
        for line in conn.execute(sa.select(ledger_lines)).all():
            ledger[line.payment_id][line.account.split(":", 1)[0]] += int(line.amount)
    for operation in ops:
        if operation.status not in ("succeeded", "failed"):
            problems[operation.payment_id].append(f"stuck: {operation.id} {operation.status}")
    # Adyen closes a payment's remainder after a partial capture (its default, and the
    # simulator's), so a second capture would be refused there rather than move money
    # twice: executions per operation, a refused one included, are what tell a capture sent
    # twice (a second key for one operation) from one sent once.
    for kind, code in (("capture", "CAPTURE"), ("refund", "REFUND")):
        standing = books.modifications(kind)
        per_operation = Counter(m.operation_id for m in standing)
        executed = books.executed_modifications(code)
        ours = {op.id: op for op in ops if op.kind == kind}
        for modification in standing:
            if modification.operation_id not in ours:
                problems[modification.record_id].append(
                    f"a {kind} at Adyen ({modification.psp_reference}) for no operation of ours"
                    f" ({modification.operation_id})"
                )
        for op_id, op in ours.items():
            if len(executed.get(op_id, ())) > 1:
                problems[op.payment_id].append(f"{op_id}: {kind} executed {executed[op_id]}")
            wanted = 1 if op.status == "succeeded" else 0
            if per_operation[op_id] != wanted:
                problems[op.payment_id].append(
                    f"{op_id} {op.status}: {per_operation[op_id]} {kind}s stand at Adyen"
                )
            if op.status != "succeeded" and kind == "capture":
                problems[op.payment_id].append(f"{op_id}: a capture {op.status}")
    captures = books.modifications("capture")
    refunds = books.modifications("refund")
    authorised = Counter(charge.record_id for charge in books.charges())
    for payment_id, record in records.items():
        mine = [c for c in captures if c.record_id == payment_id]
        captured = sum(c.amount for c in mine)
        refunded = sum(r.amount for r in refunds if r.record_id == payment_id)
        if authorised[payment_id] != 1:
            problems[payment_id].append(f"{authorised[payment_id]} authorisations at Adyen")
        if len(mine) != 1 or captured > AUTHORISED:
            problems[payment_id].append(f"captured at Adyen {[c.amount for c in mine]}")
        if refunded > captured:
            problems[payment_id].append(f"refunded {refunded} of {captured} at Adyen")
        ours = (str(record.status), int(record.amount_captured), int(record.amount_refunded))
        if ours != ("succeeded", captured, refunded):
            problems[payment_id].append(f"record {ours}, Adyen captured {captured} / {refunded}")
        totals = ledger[payment_id]
        if sum(totals.values()) != 0:
            problems[payment_id].append(f"ledger sums to {sum(totals.values())}")
        expected = {
            "provider_authorized": 0,
            "merchant_authorized": 0,
            "provider_receivable": captured - refunded,
            "merchant_payable": refunded - captured,
        }
        if {kind: totals[kind] for kind in expected} != expected:
            problems[payment_id].append(f"ledger {dict(totals)}, Adyen says {expected}")


def check_notifications(
    stack: Stack, adyen: RunningAdyenSimulator, problems: defaultdict[str, list[str]]
) -> None:
    """Every notification delivered (2xx) and stored once, under the payment it is about
    (a modification's by its ``originalReference``, the payment's pspReference)."""
    with stack.container.engine.connect() as conn:
        record_of = {
            row.provider_payment_id: row.id
            for row in conn.execute(sa.select(payments.c.id, payments.c.provider_payment_id))
        }
        stored = {
            row.id: row.payment_id
            for row in conn.execute(
                sa.select(provider_events.c.id, provider_events.c.payment_id).where(
                    provider_events.c.provider == "adyen"
                )
            )
        }
    delivered = {
        (d["pspReference"], d["eventCode"])
        for d in adyen.admin.notification_deliveries()
        if d["outcome"] == "delivered"
    }
    wanted: dict[str, str] = {}
    for item in adyen.admin.notification_items():
        psp, code, original = item["pspReference"], item["eventCode"], item.get("originalReference")
        payment_id = record_of.get(original or psp, f"unknown payment {original or psp}")
        if (psp, code) not in delivered:
            problems[payment_id].append(f"{code} notification {psp} never delivered")
        wanted[f"adyen:{psp}:{code}:{item['success']}:{original or ''}"] = payment_id
    for event_id, payment_id in wanted.items():
        if event_id not in stored:
            problems[payment_id].append(f"notification {event_id} not stored")
        elif stored[event_id] != payment_id:
            problems[payment_id].append(f"notification {event_id} stored for {stored[event_id]}")
    for event_id in set(stored) - set(wanted):
        problems["general"].append(f"stored {event_id}, which Adyen never sent")


def render(
    stack: Stack, books: AdyenBooks, problems: defaultdict[str, list[str]], shown: int = 10
) -> str:
    """The problems, and for the first few payments concerned what Adyen received."""
    lines = []
    for payment_id in sorted(problems)[:shown]:
        lines.append(f"\n=== {payment_id}: {'; '.join(problems[payment_id])}")
        with stack.container.engine.connect() as conn:
            ids = [
                str(i)
                for i in conn.execute(
                    sa.select(operations.c.id).where(operations.c.payment_id == payment_id)
                ).scalars()
            ]
        lines.extend(f"    {line}" for line in books.history(payment_id, operations=ids))
    lines.append(f"{len(problems)} payments concerned")
    return "\n".join(lines)


def test_adyen_captures_and_refunds_happen_once_through_a_kill_a_freeze_and_lost_answers(
    stack: Stack, adyen: RunningAdyenSimulator, processes: ProcessManager
) -> None:
    account = adyen_account(stack, adyen)
    books = AdyenBooks(adyen.admin)
    log: list[str] = []
    workers = [
        stack.start_worker(processes, name="worker-a", concurrency=2),
        stack.start_worker(processes, name="worker-b", concurrency=2),
    ]
    stack.start_sweeper(processes)
    payment_ids = [
        stack.pay(
            f"chaos-adyen-mod-{n}",
            amount=AUTHORISED,
            currency="eur",
            payment_method=SUCCEEDING_CARD,
            customer="cus_chaos",
            return_url="https://shop.example/return",
            capture_method="manual",
            connector_account=account,
        )["id"]
        for n in range(PAYMENTS)
    ]
    wait_until(
        "every payment authorised",
        lambda: authorised(stack) == PAYMENTS,
        SETTLE_TIMEOUT_SECONDS,
    )

    # Captures, with a kill and a freeze.  The freeze's capture is sent only once the kill
    # is done and its replacement runs: sent with the rest, it could be captured and
    # settled while the test waited on the kill, leaving no call open to freeze.
    asks = plan_captures(payment_ids)
    frozen_asks = [ask for ask in asks if ask.payment_id == payment_ids[FREEZE_AT]]
    capturing = [InBackground(stack, [ask for ask in asks if ask not in frozen_asks])]
    try:
        killed = kill_after_the_capture(stack, adyen, workers, payment_ids[KILL_AT], log)
        workers.append(
            stack.start_worker(processes, name=f"{killed.name}-replacement", concurrency=2)
        )
        capturing.append(InBackground(stack, frozen_asks))
        frozen = freeze_past_the_lease(stack, workers, payment_ids[FREEZE_AT], log)
    finally:
        answers = [answer for batch in capturing for answer in batch.result(timeout=300)]
    wait_until(
        "every capture final", lambda: unfinished_operations(stack) == 0, SETTLE_TIMEOUT_SECONDS
    )

    # Refunds of what each payment captured.
    captured = {p: int(stack.payment(p)["amount_captured"]) for p in payment_ids}
    answers += InBackground(stack, plan_refunds(captured)).result(timeout=300)
    try:
        wait_until(
            "every refund final", lambda: unfinished_operations(stack) == 0, SETTLE_TIMEOUT_SECONDS
        )
        wait_until("every notification delivered", lambda: all_delivered(adyen), 60)
    except AssertionError as error:
        log.append(str(error))  # the invariants then name every payment concerned
    faults = Counter(
        f"{r['operation']}:{r['fault']}"
        for r in adyen.admin.requests()
        if r["fault"] and r["operation"] in ("capture", "refund")
    )
    deliveries = Counter(d["fault"] for d in adyen.admin.notification_deliveries() if d["fault"])
    statuses = Counter(f"{a.ask.action}:{a.status}" for a in answers)
    log.append(
        f"answers {dict(statuses)}; faults {dict(faults)}; notification faults {dict(deliveries)}"
    )
    print("\n".join(log))

    problems: defaultdict[str, list[str]] = defaultdict(list)
    check_answers(answers, problems)
    check_books(stack, books, payment_ids, problems)
    check_notifications(stack, adyen, problems)
    assert not problems, render(stack, books, problems)
    # The frozen holder woke up after the takeover: whatever it tried to write was refused.
    wait_for_output(frozen, "fenced_out", timeout=30)
    # The run exercised what it claims to.
    assert {
        "capture:timeout_after_effect",
        "capture:error_500_after",
        "refund:timeout_after_effect",
        "refund:error_500_after",
    } <= set(faults), faults
    assert {"duplicate", "reorder"} <= set(deliveries), deliveries
    assert statuses["capture:409"] > 0, "racing captures: some must have been refused"
    assert statuses["refunds:409"] > 0, "over-asking refunds: some must have been refused"
