"""The demo's failover round: one merchant with a connector account at each simulator and a
route across them (Stripe first, Adyen second); a share of its payments meet a provider-side
soft decline at Stripe (``pm_card_chargeDeclinedProcessingError``, class ``provider``), so
they fail over and succeed at Adyen, while the others succeed at Stripe.

The merchant is the demo's EUR merchant (its Adyen account is the one the Adyen simulator
sends notifications to); it gains a Stripe account and a routing rule that matches only this
round's payments (by metadata), so its other payments keep their route.  The Stripe
simulator's storm faults stay armed (a soft decline whose answer is lost must be proven by a
read before the payment may move); the Adyen simulator's are cleared for the round, so every
payment that fails over is expected to succeed at the second account.

The verdict comes from the database and from both simulators' own books, per payment (our
payment id is the Stripe intent's record and the Adyen ``reference``): money moved at both
providers for one payment (must be 0), failovers made, each with its recorded proof (a
``payment_attempts`` row), and every failed-over payment succeeded at the second account.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import outbox_events, payment_attempts, payments

# The soft decline forced at the first account: Stripe declines it with processing_error,
# a provider-side decline (the adapter's decline table says: fail over).
SOFT_DECLINE_METHOD = "pm_card_chargeDeclinedProcessingError"
PLAIN_METHOD = "pm_card_visa"
SOFT_DECLINE_EVERY = 2  # every second payment of the round
RULE_NAME = "demo-failover"
METADATA_KEY = "demo_round"
METADATA_VALUE = "failover"
RETURN_URL = "https://shop.example/checkout/complete"
# The Stripe account's own key (the simulator takes any sk_test_ key; this one is not the
# platform's, so its payments are visibly the connector account's).
STRIPE_ACCOUNT_KEY = "sk_test_payorchDemoRouted"
AMOUNT_BASE = 2300
# How long a payment of the round may take to become final (a soft decline whose answer was
# lost is read back before the move, then the payment runs again at the second account).
SETTLE_SECONDS = 90.0
FINAL = frozenset({"succeeded", "failed", "canceled"})


@dataclass(frozen=True)
class RoutedPayment:
    """One payment of the round, as its row says, and whether the round forced a soft
    decline at its first account."""

    id: str
    status: str
    connector_account: str | None
    failovers: int
    soft_decline: bool


@dataclass(frozen=True)
class RecordedAttempt:
    """A ``payment_attempts`` row: an attempt that ended in a failover, with its proof."""

    payment_id: str
    connector_account: str
    next_connector_account: str
    proof: str


@dataclass
class FailoverTally:
    payments: int = 0
    soft_declines_forced: int = 0  # payments sent with a soft-declining card for Stripe
    failovers: int = 0  # payment_attempts rows: each a move to the next account
    failed_over_succeeded: int = 0  # at the second account, money there only, proof recorded
    succeeded_at_first: int = 0
    failed: int = 0
    money_at_two_providers: int = 0  # must be 0
    failovers_without_proof: int = 0  # must be 0
    stuck: int = 0  # must be 0
    events: int = 0  # merchant events the round's payments wrote
    payment_ids: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def failover_round(
    container: Container,
    api_url: str,
    api_key: str,
    adyen_account: str,
    count: int,
    stripe_admin: Any,
    adyen_admin: Any,
) -> FailoverTally:
    """``api_key`` is the merchant's that owns ``adyen_account``; the admins read each
    simulator's books (and the Adyen one's faults are cleared for the round)."""
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=api_url, headers=headers, timeout=30, trust_env=False) as client:
        stripe_account = _stripe_account(client)
        _route(client, stripe_account, adyen_account)
    adyen_admin.clear_faults()
    plan = [(n, n % SOFT_DECLINE_EVERY == 0) for n in range(count)]

    def pay(item: tuple[int, bool]) -> tuple[str | None, bool, str | None]:
        n, soft = item
        with httpx.Client(base_url=api_url, headers=headers, timeout=30, trust_env=False) as client:
            payment_id, problem = _send(client, n, soft, stripe_account, adyen_account)
            if payment_id is not None:
                _wait_until_final(client, payment_id)
            return payment_id, soft, problem

    with ThreadPoolExecutor(max_workers=8) as pool:
        sent = list(pool.map(pay, plan))
    soft_by_id = {payment_id: soft for payment_id, soft, _ in sent if payment_id is not None}
    problems = [problem for _, _, problem in sent if problem is not None]
    rows, attempts, events = _read(container, list(soft_by_id))
    tally = judge_failover(
        (
            RoutedPayment(r.id, r.status, r.connector_account_id, r.failovers, soft_by_id[r.id])
            for r in rows
        ),
        attempts,
        stripe_admin.movements(),
        adyen_admin.movements(),
        first_account=stripe_account,
        second_account=adyen_account,
    )
    tally.events = events
    tally.violations[:0] = problems
    if len(soft_by_id) != count:
        tally.violations.append(f"{count - len(soft_by_id)} payments of the round not accepted")
    return tally


def judge_failover(
    rows: Iterable[RoutedPayment],
    attempts: Iterable[RecordedAttempt],
    stripe_movements: dict[str, Any],
    adyen_movements: dict[str, Any],
    *,
    first_account: str,
    second_account: str,
) -> FailoverTally:
    """The round's payments against both simulators' books.  Money "moved" at Stripe is a
    charge of the payment's record; at Adyen, any authorisation with the payment's reference
    (released later or not: a hold on the card at a second provider is what failover must
    never cause).  A payment with money at both is the violation this round exists for."""
    tally = FailoverTally()
    charged: dict[str, int] = stripe_movements.get("by_record", {})
    authorised: Counter[str] = Counter(
        str(item["reference"])
        for item in adyen_movements.get("authorisations", {}).get("items", [])
        if not item.get("failed")
    )
    recorded: dict[str, list[RecordedAttempt]] = {}
    for attempt in attempts:
        recorded.setdefault(attempt.payment_id, []).append(attempt)
    for row in rows:
        tally.payments += 1
        tally.payment_ids.append(row.id)
        tally.soft_declines_forced += int(row.soft_decline)
        at_stripe, at_adyen = int(charged.get(row.id, 0)), authorised[row.id]
        if at_stripe and at_adyen:
            tally.money_at_two_providers += 1
            tally.violations.append(
                f"{row.id}: money moved at two providers (Stripe charged {at_stripe}x, "
                f"Adyen authorised {at_adyen}x)"
            )
        proven = [a for a in recorded.get(row.id, []) if a.proof.strip()]
        tally.failovers += len(recorded.get(row.id, []))
        if row.failovers > len(proven):
            tally.failovers_without_proof += row.failovers - len(proven)
            tally.violations.append(
                f"{row.id} failed over {row.failovers}x with {len(proven)} recorded proofs"
            )
        if row.status not in FINAL:
            tally.stuck += 1
            tally.violations.append(f"{row.id} (routed) did not reach a final state: {row.status}")
            continue
        if row.failovers:
            moved = [(a.connector_account, a.next_connector_account) for a in proven]
            if (
                row.status == "succeeded"
                and row.connector_account == second_account
                and moved == [(first_account, second_account)]
                and (at_stripe, at_adyen) == (0, 1)
            ):
                tally.failed_over_succeeded += 1
            else:
                tally.violations.append(
                    f"{row.id} failed over but ended {row.status} at {row.connector_account} "
                    f"(Stripe charged {at_stripe}x, Adyen authorised {at_adyen}x)"
                )
            continue
        if row.soft_decline:
            tally.violations.append(
                f"{row.id} met a soft decline at {first_account} but never failed over "
                f"(ended {row.status})"
            )
        if row.status == "succeeded":
            if row.connector_account == first_account and (at_stripe, at_adyen) == (1, 0):
                tally.succeeded_at_first += 1
            else:
                tally.violations.append(
                    f"{row.id} succeeded at {row.connector_account} without failing over "
                    f"(Stripe charged {at_stripe}x, Adyen authorised {at_adyen}x)"
                )
        else:
            tally.failed += 1
            if at_stripe or at_adyen:
                tally.violations.append(
                    f"{row.id} {row.status} but money moved (Stripe {at_stripe}x, "
                    f"Adyen {at_adyen}x)"
                )
    return tally


def _stripe_account(client: httpx.Client) -> str:
    created = client.post(
        "/v1/connector_accounts",
        json={
            "name": "Stripe EU (simulator)",
            "provider": "stripe",
            "credentials": {"api_key": STRIPE_ACCOUNT_KEY},
        },
    )
    if created.status_code != 201:
        raise RuntimeError(f"the demo's Stripe account was refused: {created.text}")
    return str(created.json()["id"])


def _route(client: httpx.Client, first: str, second: str) -> None:
    """A rule for this round's payments only; every other payment keeps the default route
    (the merchant's Adyen account, as before any rule)."""
    current = client.get("/v1/routing")
    if current.status_code != 200:
        raise RuntimeError(f"the demo's routing could not be read: {current.text}")
    rule = {"name": RULE_NAME, "if": {"metadata": {METADATA_KEY: METADATA_VALUE}}}
    body = {"rules": [{**rule, "then": [first, second]}], "default": [second]}
    put = client.put("/v1/routing", json=body, headers={"If-Match": current.headers["ETag"]})
    if put.status_code != 200:
        raise RuntimeError(f"the demo's route was refused: {put.text}")


def _send(
    client: httpx.Client, n: int, soft: bool, stripe_account: str, adyen_account: str
) -> tuple[str | None, str | None]:
    """(the payment's id, None) or (None, what went wrong)."""
    body = {
        "amount": AMOUNT_BASE + n,
        "currency": "eur",
        "return_url": RETURN_URL,
        "metadata": {METADATA_KEY: METADATA_VALUE, "order": f"routed-{n}"},
        "payment_methods": {
            stripe_account: SOFT_DECLINE_METHOD if soft else PLAIN_METHOD,
            adyen_account: {
                "type": "scheme",
                "encryptedCardNumber": "test_4111111111111111",
                "encryptedExpiryMonth": "test_03",
                "encryptedExpiryYear": "test_2030",
                "encryptedSecurityCode": "test_737",
                "holderName": f"Routed Shopper {n}",
            },
        },
    }
    for _ in range(10):
        response = client.post(
            "/v1/payments", json=body, headers={"Idempotency-Key": f"demo-routed-{n}"}
        )
        if response.status_code in (200, 202):
            return str(response.json()["id"]), None
        if response.status_code < 500:
            return None, f"routed payment {n}: {response.status_code} {response.text[:200]}"
        time.sleep(0.2)
    return None, f"routed payment {n}: still {response.status_code} after 10 sends"


def _wait_until_final(client: httpx.Client, payment_id: str) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        shown = client.get(f"/v1/payments/{payment_id}")
        if shown.status_code == 200 and shown.json()["status"] in FINAL:
            return
        time.sleep(0.3)


def _read(container: Container, ids: list[str]) -> tuple[list[Any], list[RecordedAttempt], int]:
    with container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                payments.c.id,
                payments.c.status,
                payments.c.connector_account_id,
                payments.c.failovers,
            ).where(payments.c.id.in_(ids))
        ).all()
        attempts = [
            RecordedAttempt(a.payment_id, a.connector_account, a.next_connector_account, a.proof)
            for a in conn.execute(
                sa.select(payment_attempts).where(payment_attempts.c.payment_id.in_(ids))
            ).all()
        ]
        events = conn.execute(
            sa.select(sa.func.count())
            .select_from(outbox_events)
            .where(outbox_events.c.payment_id.in_(ids))
        ).scalar_one()
    return list(rows), attempts, int(events)
