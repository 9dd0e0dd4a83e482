"""Failover races under chaos (issue 40): a takeover during a failover, and Adyen's
notifications arriving after the failover was decided and the payment finished.  Real
PostgreSQL, RabbitMQ, ``payorch worker`` and ``payorch sweeper`` processes, the API, the
Stripe simulator (the platform's account) and the Adyen simulator (a connector account).

Two routes, by the payment's metadata:

    Stripe first, then Adyen   a good card: Stripe charges it
                               a processing_error card: a soft decline, the payment fails
                               over to Adyen, which authorises it
                               an insufficient_funds card: a card decline, failed, Adyen
                               never asked
    Adyen first, then Stripe   Adyen refuses ISSUER_UNAVAILABLE (a provider decline): the
                               payment fails over to Stripe, which charges a good card, or
                               declines a processing_error card (the last account: failed)

with Stripe losing answers after acting and answering 500 before acting at random.

**The takeover.**  One Stripe-first soft-declined payment is aimed at: after its failover,
Adyen holds its authorisation request (a latency fault, the key held), and the worker
holding the payment at Adyen is frozen (SIGSTOP) past its lease.  The sweeper hands the
payment to another worker, which replays the same key at Adyen and finishes it; the frozen
worker, resumed, must be fenced out of every write.

**The late notifications.**  Adyen's notifications do not reach payorch during the run (the
simulator keeps them, as Adyen queues them while an endpoint is down).  Once every payment
is final, each one is delivered, signed as Adyen signs it: the AUTHORISATION success of the
payments that failed over to Adyen, the AUTHORISATION refusal of those that left Adyen for
Stripe.  Each is stored once, wakes nothing, and changes nothing: the payments' rows, ledger
lines, merchant events and attempts are the same before and after.

Then, counted at both simulators' own books: 0 payments with money at two providers, each
succeeded payment charged exactly once at the account of its last attempt and booked there
(``provider_receivable:ca_…``), each failed one nowhere, 0 stuck, a recorded proof for every
failover.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
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
from devtools.adyen_simulator.notifications import envelope
from orchestrator.db.tables import (
    ledger_lines,
    outbox_events,
    payment_attempts,
    payments,
    provider_events,
)
from orchestrator.providers.adyen_hmac import signed_item
from tests.chaos.failover_stack import (
    adyen_account,
    authorised_at_adyen,
    holder,
    notification_url,
    payment_count,
    proofs,
    rows,
)
from tests.chaos.holders import FROZEN_CONSUMER_SECONDS, freeze_while_holding, wait_until
from tests.harness.stack import E2E_SETTINGS, Stack, running_stack, wait_for_output
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.support.processes import ManagedProcess, ProcessManager

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(500)]

SEED = 20261241
PAYMENTS = payment_count(100)
GOOD, SOFT, HARD = (
    "pm_card_visa",
    "pm_card_chargeDeclinedProcessingError",
    "pm_card_chargeDeclinedInsufficientFunds",
)
# The payment the freeze is aimed at: an amount no other payment has (theirs are below
# 100 000), so the Adyen fault below fires for it alone.  Sent last, so the watch for its
# holder starts before it can reach Adyen, however slowly the others are sent.
FREEZE_AT, FREEZE_AMOUNT = PAYMENTS - 1, 100_004
ADYEN_FAULTS = (
    # Its authorisation lags with the key held (a replay meanwhile gets 704, in progress):
    # its holder is frozen with the call open, after the failover.
    f"payments:latency:amounts={FREEZE_AMOUNT}:seconds=3:times=1",
)
STRIPE_FAULTS = (
    "confirm:timeout_after_effect:0.1",
    "confirm:error_500_before:0.1",
)
ADYEN_FIRST = {
    "name": "adyen-first",
    "if": {"metadata": {"first": "adyen"}},
    "then": ["adyen", "platform"],
}
CHAOS_SETTINGS: dict[str, Any] = {
    # A freeze costs a payment a claim, and a payment may meet several unknown outcomes at
    # Stripe: keep the parking threshold well above what one payment meets here.
    "max_attempts": 10,
    "db_pool_size": 10,
    "db_max_overflow": 10,
    "api_threads": 20,
}
LEASE_SECONDS = float(E2E_SETTINGS["lease_seconds"])
RETURN_URL = "https://shop.example/return"
SETTLE_TIMEOUT_SECONDS = 240.0


@pytest.fixture
def adyen() -> Iterator[RunningAdyenSimulator]:
    config = AdyenSimulatorConfig(
        seed=SEED,
        faults=tuple(parse_fault_spec(spec) for spec in ADYEN_FAULTS),
        api_keys=(API_KEY,),
        merchant_accounts=(MERCHANT,),
    )
    with start_in_thread(config) as simulator:
        yield simulator


@pytest.fixture
def stack(make_postgres_database, make_broker_url, adyen) -> Iterator[Stack]:
    with running_stack(
        make_postgres_database(), make_broker_url(), adyen_api_base=adyen.url, **CHAOS_SETTINGS
    ) as built:
        yield built


def plan(account: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """(key, body, expected status, the provider that charges it or ""): a seeded mix of
    both routes and of good, soft and hard cards."""
    rng = random.Random(SEED)
    planned = []
    for index in range(PAYMENTS):
        adyen_first = index != FREEZE_AT and rng.random() < 0.4
        if adyen_first:
            stripe_card = rng.choice((GOOD, GOOD, SOFT))
            holder_name = "ISSUER_UNAVAILABLE"
            expected, charged = ("succeeded", "stripe") if stripe_card == GOOD else ("failed", "")
        else:
            stripe_card = SOFT if index == FREEZE_AT else rng.choice((GOOD, SOFT, SOFT, HARD))
            holder_name = "John Smith"
            expected, charged = {
                GOOD: ("succeeded", "stripe"),
                SOFT: ("succeeded", "adyen"),
                HARD: ("failed", ""),
            }[stripe_card]
        body = {
            "amount": FREEZE_AMOUNT if index == FREEZE_AT else rng.randrange(500, 90_000),
            "currency": "eur",
            "payment_method": stripe_card,
            "return_url": RETURN_URL,
            "metadata": {"first": "adyen" if adyen_first else "stripe"},
            "payment_methods": {
                account: {
                    "type": "scheme",
                    "encryptedCardNumber": "test_4111111111111111",
                    "holderName": holder_name,
                }
            },
        }
        planned.append((f"race-{SEED}-{index}", body, expected, charged))
    return planned


def freeze_during_the_failover(
    stack: Stack, workers: list[ManagedProcess], key: str, log: list[str]
) -> ManagedProcess:
    """SIGSTOP the worker holding the payment ``key`` at its second account (after its
    failover, its authorisation open at Adyen) until another worker took the lease over and
    finished it; SIGCONT; return the frozen worker."""

    def record() -> dict[str, Any]:
        found = next((r for r in rows(stack).values() if r["idempotency_key"] == key), None)
        return found or {"status": "processing", "lease_owner": None, "lease_token": 0}

    def calling_the_next_account(found: dict[str, Any]) -> ManagedProcess | None:
        if found["status"] != "processing" or found.get("failovers") != 1:
            return None
        if found["confirm_attempts"] < 1:
            return None  # moved, Adyen not called yet
        return holder(workers, found["lease_owner"])

    victim, held = freeze_while_holding(
        f"{key}'s authorisation at its next account", record, calling_the_next_account, 120
    )
    try:

        def finished_elsewhere() -> bool:
            found = record()
            moved = int(found["lease_token"]) > int(held["lease_token"])
            return moved and found["status"] in ("succeeded", "failed")

        # The lease expires, the sweeper hands the payment to another worker, whose replay
        # of the same key reads Adyen's answer.
        wait_until(
            f"{key} taken over and finished",
            finished_elsewhere,
            8 * LEASE_SECONDS + FROZEN_CONSUMER_SECONDS + 60,
        )
    finally:
        victim.resume()
    log.append(f"SIGSTOP {victim.name} holding {held['id']} at Adyen after its failover")
    return victim


def snapshot(stack: Stack) -> dict[str, Any]:
    """What a late notification must not change: every payment's row, ledger lines,
    merchant events and ended attempts."""
    with stack.container.engine.connect() as conn:

        def all_of(query: sa.Select[Any]) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(query)]

        return {
            "payments": all_of(
                sa.select(
                    payments.c.id,
                    payments.c.status,
                    payments.c.lease_token,
                    payments.c.lease_owner,
                    payments.c.next_attempt_at,
                    payments.c.failovers,
                    payments.c.connector_account_id,
                    payments.c.provider_payment_id,
                    payments.c.amount_captured,
                    payments.c.updated_at,
                ).order_by(payments.c.id)
            ),
            "ledger": all_of(sa.select(ledger_lines).order_by(ledger_lines.c.id)),
            "events": all_of(
                sa.select(outbox_events.c.id, outbox_events.c.payment_id).order_by(
                    outbox_events.c.id
                )
            ),
            "attempts": all_of(
                sa.select(payment_attempts).order_by(
                    payment_attempts.c.payment_id, payment_attempts.c.number
                )
            ),
        }


def deliver_late(stack: Stack, account: str, items: list[dict[str, Any]]) -> None:
    """Each item POSTed as Adyen delivers it (signed with the account's HMAC key)."""
    with httpx.Client(timeout=30, trust_env=False) as http:
        for item in items:
            answer = http.post(
                notification_url(stack, account), json=envelope(signed_item(item, HMAC_KEY))
            )
            assert answer.status_code == 200, answer.text


def stored_notifications(stack: Stack) -> dict[str, tuple[str | None, bool]]:
    """Adyen's stored notifications: ``{event id: (payment id, woke its payment)}``."""
    with stack.container.engine.connect() as conn:
        return {
            str(r.id): (r.payment_id, bool(r.woke_payment))
            for r in conn.execute(
                sa.select(
                    provider_events.c.id,
                    provider_events.c.payment_id,
                    provider_events.c.woke_payment,
                ).where(provider_events.c.provider == "adyen")
            )
        }


def event_id(item: dict[str, Any]) -> str:
    original = item.get("originalReference") or ""
    return f"adyen:{item['pspReference']}:{item['eventCode']}:{item['success']}:{original}"


def test_a_takeover_during_a_failover_and_late_notifications_never_charge_twice(
    stack: Stack, adyen: RunningAdyenSimulator, processes: ProcessManager
) -> None:
    account = adyen_account(stack, adyen, rules=[ADYEN_FIRST], notify=False)
    for spec in STRIPE_FAULTS:
        stack.simulator.admin.add_fault(spec)
    planned = plan(account)
    log: list[str] = []
    workers = [
        stack.start_worker(processes, name="worker-a", concurrency=2),
        stack.start_worker(processes, name="worker-b", concurrency=2),
    ]
    stack.start_sweeper(processes)
    with stack.client() as client:
        for key, body, _, _ in planned:
            answer = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
            assert answer.status_code == 202, answer.text
    frozen = freeze_during_the_failover(stack, workers, planned[FREEZE_AT][0], log)

    def all_final() -> bool:
        return all(r["status"] in ("succeeded", "failed") for r in rows(stack).values())

    wait_until("every payment final (0 stuck)", all_final, SETTLE_TIMEOUT_SECONDS)
    # The frozen holder woke up after the takeover: whatever it tried to write was refused.
    wait_for_output(frozen, "fenced_out", timeout=60)

    # The late notifications: every payment final, the frozen worker's writes refused.
    before = snapshot(stack)
    items = adyen.admin.notification_items()
    deliver_late(stack, account, items)
    stored = stored_notifications(stack)
    after = snapshot(stack)

    by_key = {r["idempotency_key"]: r for r in rows(stack).values()}
    stripe_books = stack.simulator.admin.movements()["by_record"]
    adyen_books = authorised_at_adyen(adyen)
    proven = proofs(stack)
    receivable = receivables(stack)
    problems = []
    for key, _, expected, charged in planned:
        record = by_key[key]
        record_id = str(record["id"])
        at_stripe, at_adyen = int(stripe_books.get(record_id, 0)), adyen_books[record_id]
        if at_stripe and at_adyen:
            problems.append(f"{record_id}: money at two providers")
        if record["status"] != expected:
            problems.append(f"{record_id}: {record['status']}, expected {expected}")
        moved = {"stripe": at_stripe, "adyen": at_adyen}
        wanted = {"stripe": int(charged == "stripe"), "adyen": int(charged == "adyen")}
        if moved != wanted:
            problems.append(f"{record_id}: charged {moved}, expected {wanted}")
        if charged and record["provider"] != charged:
            problems.append(f"{record_id}: charged at {charged}, recorded at {record['provider']}")
        if proven[record_id] != record["failovers"]:
            problems.append(
                f"{record_id}: {record['failovers']} failovers, {proven[record_id]} proofs"
            )
        booked_at = record["connector_account_id"] or "ca_platform_stripe"
        owed = {f"provider_receivable:{booked_at}": record["amount"]} if charged else {}
        if receivable.get(record_id, {}) != owed:
            problems.append(f"{record_id}: receivable {receivable.get(record_id)}, expected {owed}")
    for item in items:
        found = stored.get(event_id(item))
        if found is None:
            problems.append(f"late notification {event_id(item)} not stored")
        elif found[1]:
            problems.append(f"late notification {event_id(item)} woke {found[0]}")
    if after != before:
        changed = [name for name in before if before[name] != after[name]]
        problems.append(f"the late notifications changed {changed}")
    codes = Counter((i["eventCode"], i["success"]) for i in items)
    failovers = sum(r["failovers"] for r in by_key.values())
    faults = Counter(r["fault"] for r in stack.simulator.admin.requests() if r.get("fault"))
    log.append(
        f"{failovers} failovers; {len(items)} late notifications {dict(codes)}; "
        f"Stripe faults {dict(faults)}"
    )
    print("\n".join(log))
    assert problems == [], "\n".join(problems)
    # The run exercised what it claims to: failovers both ways, and late notifications of
    # both an authorisation after a failover and a refusal the payment failed over from.
    assert {c for _, _, _, c in planned} >= {"stripe", "adyen"}
    assert codes[("AUTHORISATION", "true")] >= 1 and codes[("AUTHORISATION", "false")] >= 1, codes
    assert any(record["failovers"] and record["provider"] == "stripe" for record in by_key.values())


def receivables(stack: Stack) -> dict[str, dict[str, int]]:
    """Per payment, its ``provider_receivable:…`` accounts' sums (zero sums left out)."""
    with stack.container.engine.connect() as conn:
        rows_ = conn.execute(
            sa.select(
                ledger_lines.c.payment_id,
                ledger_lines.c.account,
                sa.func.sum(ledger_lines.c.amount),
            )
            .where(ledger_lines.c.account.like("provider_receivable:%"))
            .group_by(ledger_lines.c.payment_id, ledger_lines.c.account)
        ).all()
    found: dict[str, dict[str, int]] = {}
    for payment_id, account, total in rows_:
        if int(total):
            found.setdefault(str(payment_id), {})[str(account)] = int(total)
    return found
