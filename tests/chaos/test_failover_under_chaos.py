"""Failover under chaos (issue 40): real PostgreSQL, real RabbitMQ, real ``payorch worker`` and
``payorch sweeper`` processes, the API, the Stripe simulator (the platform's account) and the
Adyen simulator (a connector account), every payment routed Stripe first, then Adyen.

What the payments pay with decides what Stripe does:

    a good card                Stripe charges it (no failover)
    a processing_error card    Stripe declines softly (class provider): the payment fails over
                               to Adyen, which authorises it
    an insufficient_funds card Stripe declines hard (class card): the payment fails, Adyen is
                               never asked

and Stripe meanwhile acts then loses its answer (``timeout_after_effect``) and answers 500
without acting (``error_500_before``) at random.  One soft-declined payment is aimed at: after
its failover, Adyen authorises it and holds the answer back, and the worker holding it is
SIGKILLed with the authorisation done and not recorded; a replacement starts, and the
payment's next holder must resume at Adyen with the same derived key.

Then, counted at both simulators' own books: **0 payments with money at two providers**, each
succeeded payment charged exactly once (at the provider of its last attempt), each failed one
nowhere, 0 payments stuck, and every failover preceded by its recorded proof at the account it
left (a ``payment_attempts`` row per failover, the only way a payment reaches Adyen here).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    RunningAdyenSimulator,
    parse_fault_spec,
    start_in_thread,
)
from tests.chaos.failover_stack import (
    adyen_account,
    authorised_at_adyen,
    holder,
    payment_count,
    proofs,
    rows,
)
from tests.chaos.holders import wait_until
from tests.harness.stack import Stack, running_stack
from tests.integration.adyen_simulator_helpers import API_KEY, MERCHANT
from tests.support.processes import ManagedProcess, ProcessManager

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]

SEED = 20261240
PAYMENTS = payment_count()
GOOD, SOFT, HARD = (
    "pm_card_visa",
    "pm_card_chargeDeclinedProcessingError",
    "pm_card_chargeDeclinedInsufficientFunds",
)
# The payment the kill is aimed at: an amount no other payment has (theirs are below 100 000).
KILL_AMOUNT = 100_003
ADYEN_FAULTS = (
    # Authorised, then the answer held past the worker's timeout; the replays that follow fail
    # before reaching Adyen, so nothing records the answer before the kill, however slow.
    f"payments:timeout_after_effect:amounts={KILL_AMOUNT}:times=1",
    f"payments:error_500_before:amounts={KILL_AMOUNT}:times=3",
)
STRIPE_FAULTS = (
    "confirm:timeout_after_effect:0.1",
    "confirm:error_500_before:0.1",
)
CHAOS_SETTINGS: dict[str, Any] = {
    "max_attempts": 10,
    "db_pool_size": 10,
    "db_max_overflow": 10,
    "api_threads": 20,
}
RETURN_URL = "https://shop.example/return"
SETTLE_TIMEOUT_SECONDS = 180.0


@pytest.fixture
def adyen() -> Iterator[RunningAdyenSimulator]:
    config = AdyenSimulatorConfig(
        seed=SEED,
        faults=tuple(parse_fault_spec(spec) for spec in ADYEN_FAULTS),
        stall_seconds=4.0,  # outlasts the 1.5 s provider timeout
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


def plan(account: str) -> list[tuple[str, dict[str, Any], str]]:
    """(key, body, expected status): a seeded mix of good, soft and hard cards at Stripe; every
    payment has a good card at Adyen."""
    rng = random.Random(SEED)
    planned = []
    for index in range(PAYMENTS):
        method = rng.choice((GOOD, SOFT, SOFT, HARD))
        amount = KILL_AMOUNT if index == 5 else rng.randrange(500, 90_000)
        if index == 5:
            method = SOFT
        body = {
            "amount": amount,
            "currency": "eur",
            "payment_method": method,
            "return_url": RETURN_URL,
            "payment_methods": {
                account: {"type": "scheme", "encryptedCardNumber": "test_4111111111111111"}
            },
        }
        planned.append(
            (f"failover-{SEED}-{index}", body, "failed" if method == HARD else "succeeded")
        )
    return planned


def kill_after_the_authorisation_at_the_next_account(
    stack: Stack, adyen: RunningAdyenSimulator, workers: list[ManagedProcess], log: list[str]
) -> ManagedProcess:
    found: dict[str, Any] = {}

    def authorised_after_failover() -> bool:
        for record in rows(stack).values():
            if record["amount"] == KILL_AMOUNT:
                found.update(record)
                if record["lease_owner"]:
                    found["sender"] = record["lease_owner"]
        record_id = found.get("id")
        return bool(record_id) and authorised_at_adyen(adyen)[record_id] > 0

    wait_until("the failed-over payment's authorisation at Adyen", authorised_after_failover, 120)
    victim = holder(workers, found.get("sender"))
    assert victim is not None, f"no running worker holds {found}"
    victim.kill()
    record = rows(stack)[found["id"]]
    # What makes this the kill it claims to be: failed over, Adyen acted, payorch had not
    # recorded it.
    assert (record["failovers"], record["status"]) == (1, "processing"), record
    log.append(f"SIGKILL {victim.name}: {found['id']} authorised at Adyen after its failover")
    return victim


def test_failover_never_moves_money_at_two_providers_through_lost_answers_and_a_kill(
    stack: Stack, adyen: RunningAdyenSimulator, processes: ProcessManager
) -> None:
    account = adyen_account(stack, adyen)
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
        for key, body, _ in planned:
            answer = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
            assert answer.status_code == 202, answer.text
    killed = kill_after_the_authorisation_at_the_next_account(stack, adyen, workers, log)
    workers.append(stack.start_worker(processes, name=f"{killed.name}-2", concurrency=2))

    def all_final() -> bool:
        return all(r["status"] in ("succeeded", "failed") for r in rows(stack).values())

    wait_until("every payment final (0 stuck)", all_final, SETTLE_TIMEOUT_SECONDS)

    by_key = {r["idempotency_key"]: r for r in rows(stack).values()}
    stripe_books = stack.simulator.admin.movements()["by_record"]
    adyen_books = authorised_at_adyen(adyen)
    proven = proofs(stack)
    problems = []
    for key, _, expected in planned:
        record = by_key[key]
        record_id = str(record["id"])
        at_stripe, at_adyen = int(stripe_books.get(record_id, 0)), adyen_books[record_id]
        if at_stripe and at_adyen:
            problems.append(f"{record_id}: money at two providers")
        if record["status"] != expected:
            problems.append(f"{record_id}: {record['status']}, expected {expected}")
        moved = at_stripe + at_adyen
        if moved != (1 if record["status"] == "succeeded" else 0):
            problems.append(f"{record_id}: {record['status']} with {moved} charges")
        if at_adyen and record["provider"] != "adyen":
            problems.append(f"{record_id}: charged at Adyen, recorded at {record['provider']}")
        if proven[record_id] != record["failovers"]:
            problems.append(
                f"{record_id}: {record['failovers']} failovers, {proven[record_id]} proofs"
            )
        if at_adyen and not proven[record_id]:
            problems.append(f"{record_id}: reached Adyen without a recorded proof")
    failovers = sum(r["failovers"] for r in by_key.values())
    faults = Counter(r["fault"] for r in stack.simulator.admin.requests() if r.get("fault"))
    log.append(f"{failovers} failovers; Stripe faults {dict(faults)}")
    print("\n".join(log))
    assert problems == [], "\n".join(problems)
    # The run exercised what it claims to.
    assert failovers >= 5, failovers
    assert any(expected == "failed" for _, _, expected in planned)
