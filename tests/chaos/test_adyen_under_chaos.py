"""The chaos suite on Adyen (issue 39): real PostgreSQL, real RabbitMQ, real ``payorch worker``
and ``payorch sweeper`` processes, the API, and the Adyen simulator with faults, every payment
pinned to one Adyen connector account whose notifications come back, signed, to the API.

While 80 logical EUR payments (each sent 1-4 times, some sends concurrent) go through:

    one payment's authorisation is done at Adyen and its answer held back: the worker that
        sent it is SIGKILLed in that window (answer not recorded), a replacement started
    another's authorisation lags at Adyen: the worker holding it is SIGSTOPped until the
        sweeper's takeover finished the payment elsewhere, then SIGCONTed (its late
        writes must be fenced out)

Adyen meanwhile times out after authorising, saves 500s after the effect, fails before it,
answers 429s and lags; its notifications are duplicated and reordered; the stored cards meant
to decline are refused.  Nothing is parked on purpose: every payment must end succeeded or
failed.

Then, counted at the simulator's own books: 0 references authorised more than once, 0
references with more than one ``/payments`` executed (a second key for one record), each
succeeded payment has exactly one authorisation with our reference and its amount, each
failed one none; outcome rows and ledger lines agree (``invariants.check``); every
notification was delivered and stored once, for its payment.

Deterministic by construction, as the Stripe suite: a seeded plan, chaos triggered by the
progress of chosen payments, waits that end when their condition holds, no timing asserted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
import sqlalchemy as sa

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    RunningAdyenSimulator,
    parse_fault_spec,
    start_in_thread,
)
from orchestrator.db.tables import payment_outcomes, payments, provider_events
from tests.chaos.books import AdyenBooks
from tests.chaos.holders import FROZEN_CONSUMER_SECONDS, freeze_while_holding, wait_until
from tests.chaos.invariants import Findings, check
from tests.chaos.merchants import InBackground, LogicalPayment, Merchants, Methods, plan_payments
from tests.harness.stack import E2E_SETTINGS, Stack, running_stack, wait_for_output
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.replay.adyen_schema import AdyenWatch
from tests.support.processes import ManagedProcess, ProcessManager, process_group

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

SEED = 20261205
LOGICAL_PAYMENTS = 80
# Logical payments started per second: ~20 s of traffic, for the chaos to happen inside.
RATE = 4.0
MAX_IN_FLIGHT = 20
# The payments the chaos is aimed at: amounts no other payment of the plan has (the plan's
# are below 100 000), so the simulator's amount-scoped faults fire for them alone.
KILL_AT, KILL_AMOUNT = 20, 100_001
FREEZE_AT, FREEZE_AMOUNT = 44, 100_002
LEASE_SECONDS = float(E2E_SETTINGS["lease_seconds"])

# The simulator's stored cards (``devtools/adyen_simulator/testdata.py``); the stored ones
# that decline are card declines, which never fail over.
ADYEN_METHODS = Methods(
    succeeding=("8415718415172200",),
    declining=("8415718415172201", "8415718415172205", "8415718415172206", "8415718415172212"),
    currencies=("eur",),
)

FAULTS = (
    # The kill's payment: authorised, then the answer held back past the worker's timeout;
    # its next replays fail before reaching Adyen, so nothing can record the answer before
    # the kill however slow the machine.
    f"payments:timeout_after_effect:amounts={KILL_AMOUNT}:times=1",
    f"payments:error_500_before:amounts={KILL_AMOUNT}:times=3",
    # The freeze's payment: its authorisation lags while the key is held (a takeover's
    # replay meanwhile gets 704, in progress), so its holder is frozen with the call open.
    f"payments:latency:amounts={FREEZE_AMOUNT}:seconds=3:times=1",
    "payments:timeout_after_effect:0.08",
    "payments:error_500_after:0.06",
    "payments:error_500_before:0.04",
    "any:rate_limit:0.03:retry_after=1",
    "any:latency:0.1:seconds=0.3",
    "webhook:duplicate:0.3",
    "webhook:reorder:0.2",
)
CHAOS_SETTINGS: dict[str, Any] = {
    # A kill and a freeze each cost a payment a claim, and a payment may meet several
    # unknown outcomes: keep the parking threshold well above what one payment meets here.
    "max_attempts": 10,
    # The API runs in this process: no more API threads than pooled connections.
    "db_pool_size": 10,
    "db_max_overflow": 10,
    "api_threads": 20,
}
# Every payment reaches its final state within this after the traffic ends (in practice
# seconds; the bound only matters when something is wrong).
SETTLE_TIMEOUT_SECONDS = 240.0


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
        make_postgres_database(),
        make_broker_url(),
        adyen_api_base=adyen.url,
        **CHAOS_SETTINGS,
    ) as built:
        yield built


@pytest.fixture
def account(stack: Stack, adyen: RunningAdyenSimulator) -> str:
    """The merchant's Adyen connector account; Adyen's notifications go to its endpoint."""
    with stack.client() as client:
        created = client.post(
            "/v1/connector_accounts",
            json={
                "name": "Adyen EU",
                "provider": "adyen",
                "credentials": {
                    "api_key": API_KEY,
                    "merchant_account": MERCHANT,
                    "hmac_key": HMAC_KEY,
                },
            },
        )
    assert created.status_code == 201, created.text
    account_id = str(created.json()["id"])
    adyen.admin.configure_notifications(
        f"{stack.api_url}/v1/providers/adyen/notifications/{account_id}", HMAC_KEY
    )
    return account_id


def adyen_plan(account: str) -> list[LogicalPayment]:
    """The seeded plan on the Adyen account, with the two targeted payments made succeeding
    ones at their fault-scoped amounts."""
    methods = replace(
        ADYEN_METHODS,
        fields=MappingProxyType(
            {
                "connector_account": account,
                # A stored card needs its shopper (shopperReference); Adyen needs returnUrl.
                "customer": "cus_chaos",
                "return_url": "https://shop.example/return",
            }
        ),
    )
    plan = plan_payments(SEED, LOGICAL_PAYMENTS, forced_amount=0, forced_count=0, methods=methods)
    for index, amount in ((KILL_AT, KILL_AMOUNT), (FREEZE_AT, FREEZE_AMOUNT)):
        target = plan[index]
        body = {**target.body, "amount": amount, "payment_method": methods.succeeding[0]}
        plan[index] = replace(target, body=body, expected="succeeded")
    return plan


def record_of(stack: Stack, key: str) -> dict[str, Any] | None:
    with stack.container.engine.connect() as conn:
        row = conn.execute(sa.select(payments).where(payments.c.idempotency_key == key)).first()
    return dict(row._mapping) if row is not None else None


def wait_for_record(stack: Stack, payment: LogicalPayment) -> str:
    found: dict[str, Any] | None = None

    def accepted() -> bool:
        nonlocal found
        found = record_of(stack, payment.key)
        return found is not None

    wait_until(f"{payment.key} accepted", accepted, timeout=120)
    assert found is not None
    return str(found["id"])


def holder(workers: list[ManagedProcess], lease_owner: str | None) -> ManagedProcess | None:
    """The running worker whose process group holds the lease (owner ``host:pid``; the
    dispatcher's hand-over, ``dispatch``, is no worker's)."""
    suffix = (lease_owner or "").rsplit(":", 1)[-1]
    if not suffix.isdigit():
        return None
    pid = int(suffix)
    return next((w for w in workers if w.poll() is None and pid in process_group(w.pid)), None)


def authorised_at_adyen(adyen: RunningAdyenSimulator, record_id: str) -> int:
    return sum(
        1
        for p in adyen.admin.payments(reference=record_id)
        if p["status"] in ("authorised", "captured")
    )


def kill_after_the_authorisation(
    stack: Stack,
    adyen: RunningAdyenSimulator,
    workers: list[ManagedProcess],
    payment: LogicalPayment,
    log: list[str],
) -> ManagedProcess:
    """SIGKILL the worker that sent ``payment``'s authorisation once Adyen has authorised
    it, before its answer is recorded; return the killed worker."""
    record_id = wait_for_record(stack, payment)
    sender: str | None = None

    def authorised() -> bool:
        nonlocal sender
        record = record_of(stack, payment.key)
        assert record is not None
        sender = record["lease_owner"] or sender
        return authorised_at_adyen(adyen, record_id) > 0

    wait_until(f"Adyen to authorise {record_id}", authorised, timeout=120)
    victim = holder(workers, sender)
    assert victim is not None, f"no running worker holds {record_id} ({sender})"
    victim.kill()
    record = record_of(stack, payment.key)
    assert record is not None
    with stack.container.engine.connect() as conn:
        outcomes = conn.execute(
            sa.select(sa.func.count())
            .select_from(payment_outcomes)
            .where(payment_outcomes.c.payment_id == record_id)
        ).scalar_one()
    # What makes this the kill it claims to be: Adyen acted, payorch had not recorded it.
    assert (record["status"], outcomes) == ("processing", 0), (record, outcomes)
    log.append(f"SIGKILL {victim.name} (pid {victim.pid}): {record_id} authorised, not recorded")
    return victim


def freeze_past_the_lease(
    stack: Stack,
    workers: list[ManagedProcess],
    payment: LogicalPayment,
    log: list[str],
) -> ManagedProcess:
    """SIGSTOP the worker holding ``payment`` while its authorisation is open at Adyen, until
    another worker took the lease over and finished the payment; SIGCONT; return it."""
    record_id = wait_for_record(stack, payment)

    def record() -> dict[str, Any]:
        found = record_of(stack, payment.key)
        assert found is not None
        return found

    def calling(found: dict[str, Any]) -> ManagedProcess | None:
        if found["status"] != "processing" or found["confirm_attempts"] < 1:
            return None
        return holder(workers, found["lease_owner"])

    victim, held = freeze_while_holding(
        f"{record_id}'s authorisation to be sent", record, calling, timeout=120
    )
    try:

        def finished_elsewhere() -> bool:
            found = record()
            moved = int(found["lease_token"]) > int(held["lease_token"])
            return moved and found["status"] in ("succeeded", "failed")

        # The lease expires, the sweeper hands the payment to another worker, whose replay
        # of the same key reads Adyen's answer.
        wait_until(
            f"{record_id} taken over and finished",
            finished_elsewhere,
            8 * LEASE_SECONDS + FROZEN_CONSUMER_SECONDS + 60,
        )
    finally:
        victim.resume()
    log.append(f"SIGSTOP {victim.name} (pid {victim.pid}) holding {record_id} past its lease")
    return victim


def unfinished(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(payments.c.status.not_in(["succeeded", "failed"]))
            ).scalar_one()
        )


def check_adyen_books(
    stack: Stack, adyen: RunningAdyenSimulator, books: AdyenBooks, findings: Findings
) -> None:
    """What only Adyen's books show: a second ``/payments`` executed for one record (a second
    key: Adyen would have authorised twice had the card been good), and notifications."""
    with stack.container.engine.connect() as conn:
        status_of = {
            row.id: str(row.status)
            for row in conn.execute(sa.select(payments.c.id, payments.c.status))
        }
        stored = {
            row.id: row.payment_id
            for row in conn.execute(
                sa.select(provider_events.c.id, provider_events.c.payment_id).where(
                    provider_events.c.provider == "adyen"
                )
            )
        }
    executed = books.executed()
    for record_id, status in status_of.items():
        if executed[record_id] != 1:
            findings.add(record_id, f"{executed[record_id]} /payments executed at Adyen ({status})")
    # Every notification was delivered (2xx) and stored once, under its payment.
    items = adyen.admin.notification_items()
    delivered = {
        (d["pspReference"], d["eventCode"])
        for d in adyen.admin.notification_deliveries()
        if d["outcome"] == "delivered"
    }
    wanted: dict[str, str] = {}
    for item in items:
        psp, code, reference = item["pspReference"], item["eventCode"], item["merchantReference"]
        if (psp, code) not in delivered:
            findings.add(reference, f"{code} notification {psp} never delivered")
        wanted[f"adyen:{psp}:{code}:{item['success']}:{item.get('originalReference') or ''}"] = (
            reference
        )
    for event_id, reference in wanted.items():
        if event_id not in stored:
            findings.add(reference, f"notification {event_id} not stored")
        elif stored[event_id] != reference:
            findings.add(reference, f"notification {event_id} stored for {stored[event_id]}")
    for event_id in set(stored) - set(wanted):
        findings.general.append(f"stored {event_id}, which Adyen never sent")


def all_delivered(adyen: RunningAdyenSimulator) -> bool:
    """Every notification item made has a delivery that payorch answered 2xx (a reordered
    one waits for its successor, so the last items arrive a little after the traffic)."""
    delivered = {
        (d["pspReference"], d["eventCode"])
        for d in adyen.admin.notification_deliveries()
        if d["outcome"] == "delivered"
    }
    return all(
        (i["pspReference"], i["eventCode"]) in delivered for i in adyen.admin.notification_items()
    )


def test_every_adyen_payment_is_authorised_at_most_once_through_a_kill_a_freeze_and_lost_answers(
    stack: Stack, adyen: RunningAdyenSimulator, account: str, processes: ProcessManager
) -> None:
    plan = adyen_plan(account)
    merchants = Merchants(
        stack.api_url, stack.merchant_key, plan, rate=RATE, max_in_flight=MAX_IN_FLIGHT
    )
    books = AdyenBooks(adyen.admin)
    log: list[str] = []
    workers = [
        stack.start_worker(processes, name="worker-a", concurrency=2),
        stack.start_worker(processes, name="worker-b", concurrency=2),
    ]
    stack.start_sweeper(processes)
    running = InBackground(merchants.run())
    try:
        killed = kill_after_the_authorisation(stack, adyen, workers, plan[KILL_AT], log)
        workers.append(
            stack.start_worker(processes, name=f"{killed.name}-replacement", concurrency=2)
        )
        frozen = freeze_past_the_lease(stack, workers, plan[FREEZE_AT], log)
    finally:
        traffic = running.result(timeout=300)
    log.append(f"merchants done: {len(traffic.answers)} answers")
    try:
        wait_until("every payment final", lambda: unfinished(stack) == 0, SETTLE_TIMEOUT_SECONDS)
        wait_until("every notification delivered", lambda: all_delivered(adyen), 60)
    except AssertionError as error:
        log.append(str(error))  # the invariants then name every payment concerned
    faults = [r["fault"] for r in adyen.admin.requests() if r["fault"]]
    deliveries = [d["fault"] for d in adyen.admin.notification_deliveries() if d["fault"]]
    log.append(
        f"{len(adyen.admin.payments())} /payments executed at Adyen; faults "
        f"{dict(Counter(faults))}; notification faults {dict(Counter(deliveries))}"
    )
    print("\n".join(log))

    findings = check(stack, plan, traffic, parked_expected=False, books=books)
    check_adyen_books(stack, adyen, books, findings)
    assert findings.ok, findings.render(stack)
    # The frozen holder woke up after the takeover: whatever it tried to write was refused.
    wait_for_output(frozen, "fenced_out", timeout=30)
    # The run exercised what it claims to (the faults are drawn, not scheduled).
    assert {"timeout_after_effect", "error_500_after"} <= set(faults), faults
    assert {"duplicate", "reorder"} <= set(deliveries), deliveries
    assert any(p.expected == "failed" for p in plan), "the plan must decline some payments"

    # A merchant asking once more after everything finished gets the stored final answer.
    with stack.client() as client:
        for payment in plan:
            response = client.post(
                "/v1/payments", json=payment.body, headers={"Idempotency-Key": payment.key}
            )
            assert response.status_code == 200, (payment.key, response.text)
            assert response.headers["Idempotent-Replayed"] == "true"
            assert response.json()["status"] == payment.expected, (payment.key, response.json())
