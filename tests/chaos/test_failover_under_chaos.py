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

**A kill -9 between "A proven not charged" and "B acted"** (a second test, on a stack of its
own): a soft-declined payment fails over, and Adyen holds its first authorisation request
(a ``hold`` fault: nothing done, no key claimed) while the worker waits on it.  With that
worker stopped, the test checks it is the process with the held call open (its socket) and
still holds the lease, that the proof is recorded and nothing moved at either provider; then
SIGKILLs it.  The held request dies with its client, doing nothing.  The sweeper's takeover
hands the payment to another worker, which calls Adyen with the same key: executed once
there (not a replay of a saved answer), the payment succeeded at Adyen, never at Stripe.
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
    connection_owners,
    holder,
    payment_count,
    proofs,
    rows,
)
from tests.chaos.holders import wait_until
from tests.harness.stack import Stack, running_stack
from tests.integration.adyen_simulator_helpers import API_KEY, MERCHANT
from tests.support.processes import ManagedProcess, ProcessManager, process_group

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

    def held_after_its_authorisation() -> bool:
        # Adyen's books first, then the row: the holder read is never older than the
        # authorisation it is paired with.  Between the replays that fail, the payment is
        # deferred and re-dispatched (a dispatch owner, no worker): poll on until a worker
        # holds it again, still unrecorded.
        record_id = found.get("id")
        authorised = bool(record_id) and authorised_at_adyen(adyen)[record_id] > 0
        for record in rows(stack).values():
            if record["amount"] == KILL_AMOUNT:
                found.update(record)
        return authorised and holder(workers, found.get("lease_owner")) is not None

    wait_until(
        "a worker holding the failed-over payment after its authorisation at Adyen",
        held_after_its_authorisation,
        120,
    )
    victim = holder(workers, found.get("lease_owner"))
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


# -- the kill between the proof and the next account ----------------------------------------
#
# The payment aimed at soft-declines at Stripe and fails over; Adyen holds its first
# authorisation request without acting on it (a ``hold`` fault: no effect, no key claimed)
# while the worker waits on it.  That worker is SIGKILLed there: A proven not charged and the
# proof committed, B asked but not acted.  The held request dies with its client, and the
# payment's next holder must call Adyen with the same key, once.
HELD_AMOUNT = 100_007
HELD_PAYMENTS = 12
# The window is the worker's read timeout on the held call: long here (a kill needs
# milliseconds), so no load on the machine closes it first.  The lease outlasts the task's
# limits (provider timeout < 0.6 x lease), and the takeover after the kill waits it out.
HELD_SETTINGS: dict[str, Any] = {
    **CHAOS_SETTINGS,
    "lease_seconds": 16.0,
    "dispatch_lease_seconds": 16.0,
    "provider_timeout_seconds": 8.0,
}


@pytest.fixture
def held_adyen() -> Iterator[RunningAdyenSimulator]:
    config = AdyenSimulatorConfig(seed=SEED, api_keys=(API_KEY,), merchant_accounts=(MERCHANT,))
    with start_in_thread(config) as simulator:
        yield simulator


@pytest.fixture
def held_stack(make_postgres_database, make_broker_url, held_adyen) -> Iterator[Stack]:
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        adyen_api_base=held_adyen.url,
        **HELD_SETTINGS,
    ) as built:
        yield built


def held_plan(account: str) -> list[tuple[str, dict[str, Any], str]]:
    """A few good, soft and hard cards around the payment aimed at (sent last)."""
    rng = random.Random(SEED + 1)
    planned = []
    for index in range(HELD_PAYMENTS):
        aimed = index == HELD_PAYMENTS - 1
        method = SOFT if aimed else (GOOD, SOFT, HARD)[index % 3]
        body = {
            "amount": HELD_AMOUNT if aimed else rng.randrange(500, 90_000),
            "currency": "eur",
            "payment_method": method,
            "return_url": RETURN_URL,
            "payment_methods": {
                account: {"type": "scheme", "encryptedCardNumber": "test_4111111111111111"}
            },
        }
        planned.append((f"held-{SEED}-{index}", body, "failed" if method == HARD else "succeeded"))
    return planned


def adyen_calls(adyen: RunningAdyenSimulator, reference: str) -> list[dict[str, Any]]:
    return [
        r
        for r in adyen.admin.requests()
        if r["operation"] == "payments" and r["reference"] == reference
    ]


def kill_while_the_next_account_holds_the_call(
    stack: Stack, adyen: RunningAdyenSimulator, workers: list[ManagedProcess], log: list[str]
) -> tuple[ManagedProcess, dict[str, Any], dict[str, Any]]:
    """SIGKILL the worker whose authorisation Adyen holds; return it, the payment's row and
    the held request as they were at the kill."""
    held: dict[str, Any] = {}

    def a_call_is_held() -> bool:
        found = [r for r in adyen.admin.requests() if r["hold"] is not None]
        if found:
            held.update(found[0])
        return bool(found)

    wait_until("Adyen holding the failed-over payment's authorisation", a_call_is_held, 120)
    payment_id = str(held["reference"])
    record = rows(stack)[payment_id]
    # The state the kill is aimed at, read while the call is held: A (Stripe) proven not
    # charged, the failover and its proof committed, B (Adyen) asked and not acted.
    assert held["hold"] == "holding", f"the held call ended before the kill: {held}"
    assert (record["status"], record["failovers"], record["provider"]) == (
        "processing",
        1,
        "adyen",
    ), record
    assert proofs(stack)[payment_id] == 1, "Adyen was called before the proof was recorded"
    assert not stack.simulator.admin.movements()["by_record"].get(payment_id), "charged at A"
    assert authorised_at_adyen(adyen)[payment_id] == 0
    victim = holder(workers, record["lease_owner"])
    assert victim is not None, f"no running worker holds {record}"
    port = int(str(held["client"]).rsplit(":", 1)[1])
    victim.pause()
    try:
        # Stopped, the victim can change nothing: check that it is the process with the
        # held call open and that it still holds the lease, then kill it.
        callers = connection_owners(port, process_group(victim.pid))
        assert callers, f"{victim.name} does not hold the call held at Adyen ({held})"
        now = adyen_calls(adyen, payment_id)
        again = rows(stack)[payment_id]
        assert [r["hold"] for r in now] == ["holding"], f"missed the window: {now}"
        same = (again["lease_token"], again["lease_owner"]) == (
            record["lease_token"],
            record["lease_owner"],
        )
        assert same and again["status"] == "processing", f"missed the window: {again}"
    except BaseException:
        victim.resume()
        raise
    victim.kill()
    log.append(f"SIGKILL {victim.name} (pids {sorted(callers)}) with {payment_id}'s call held")
    return victim, record, held


def test_a_kill_between_the_proof_and_the_next_accounts_answer_charges_once(
    held_stack: Stack, held_adyen: RunningAdyenSimulator, processes: ProcessManager
) -> None:
    stack, adyen = held_stack, held_adyen
    account = adyen_account(stack, adyen)
    stack.simulator.admin.add_fault("confirm:error_500_before:0.1")
    adyen.admin.add_fault(f"payments:hold:amounts={HELD_AMOUNT}:times=1")
    planned = held_plan(account)
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
    killed, record, held = kill_while_the_next_account_holds_the_call(stack, adyen, workers, log)
    payment_id = str(record["id"])

    def dropped() -> bool:
        return adyen_calls(adyen, payment_id)[0]["hold"] != "holding"

    # The held call dies with its client: nothing done at Adyen, nothing to apply later.
    wait_until("the held call dropped with its client", dropped, 60)
    first = adyen_calls(adyen, payment_id)[0]
    assert (first["hold"], first["status"]) == ("client_gone", 500), first
    assert adyen.admin.payments(reference=payment_id) == []
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
        row = by_key[key]
        record_id = str(row["id"])
        at_stripe, at_adyen = int(stripe_books.get(record_id, 0)), adyen_books[record_id]
        if at_stripe and at_adyen:
            problems.append(f"{record_id}: money at two providers")
        if row["status"] != expected:
            problems.append(f"{record_id}: {row['status']}, expected {expected}")
        if at_stripe + at_adyen != (1 if row["status"] == "succeeded" else 0):
            problems.append(f"{record_id}: {row['status']} with {at_stripe + at_adyen} charges")
        if proven[record_id] != row["failovers"] or (at_adyen and not proven[record_id]):
            problems.append(
                f"{record_id}: {row['failovers']} failovers, {proven[record_id]} proofs"
            )
    print("\n".join(log))
    assert problems == [], "\n".join(problems)

    # The payment killed in the window: resumed at Adyen by another holder under the same
    # key, executed there once (the held request never was), succeeded at Adyen only.
    final = rows(stack)[payment_id]
    assert (final["status"], final["provider"], final["failovers"]) == ("succeeded", "adyen", 1)
    assert final["lease_token"] > record["lease_token"], "never taken over"
    calls = adyen_calls(adyen, payment_id)
    assert {c["idempotency_key"] for c in calls} == {held["idempotency_key"]}, calls
    executed = [c for c in calls if c["status"] == 200 and not c["replayed"]]
    assert len(executed) == 1 and executed[0]["seq"] > held["seq"], calls
    assert adyen_books[payment_id] == 1 and not stripe_books.get(payment_id)
