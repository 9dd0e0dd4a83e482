"""Issue 12's acceptance for changes the provider reports on its own: real PostgreSQL,
RabbitMQ, ``payorch worker`` and ``payorch sweeper`` processes, the API, and the simulator
delivering Stripe-signed webhooks.  A refund made in the simulator's dashboard appears in the
payment's refunds (origin provider), in ``amount_refunded`` and in the ledger; a replayed
event and a second hint about the same refund change nothing.  A manual-capture payment whose
customer authenticates later is settled at ``requires_capture`` by the provider's
``payment_intent.amount_capturable_updated``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator.webhooks import signature_header
from orchestrator.db.tables import operations, outbox_events, provider_events
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import WaitingFor
from tests.harness.stack import Stack, running_stack

SECRET = "whsec_payorch_provider_refunds_e2e"
PATH = "/v1/providers/stripe/webhooks"
DEADLINE_SECONDS = 60.0


@pytest.fixture
def make_stack(make_postgres_database, make_broker_url, processes):
    """A stack whose simulator delivers every event to the API, plus a worker and a sweeper."""

    @contextmanager
    def build(**overrides: Any) -> Iterator[Stack]:
        with running_stack(
            make_postgres_database(),
            make_broker_url(),
            stripe_webhook_secret=SECRET,
            **overrides,
        ) as built:
            built.simulator.admin.configure_webhooks(built.api_url + PATH, SECRET)
            built.start_sweeper(processes)
            built.start_worker(processes)
            yield built

    return build


@pytest.fixture
def stack(make_stack) -> Iterator[Stack]:
    with make_stack() as built:
        yield built


def poll(what: str, read: Callable[[], Any], check: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        value = read()
        if check(value):
            return value
        assert time.monotonic() < deadline, f"{what} never held: {value}"
        time.sleep(0.2)


def refunds(stack: Stack, payment_id: str) -> list[dict[str, Any]]:
    with stack.client() as client:
        response = client.get(f"/v1/payments/{payment_id}/refunds")
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def outbox(stack: Stack, payment_id: str) -> list[str]:
    query = (
        sa.select(outbox_events.c.event_type)
        .where(outbox_events.c.payment_id == payment_id)
        .order_by(outbox_events.c.id)
    )
    with stack.container.engine.connect() as conn:
        return list(conn.execute(query).scalars())


def syncs(stack: Stack, payment_id: str) -> list[dict[str, Any]]:
    query = sa.select(operations).where(
        operations.c.payment_id == payment_id, operations.c.kind == "refund_sync"
    )
    with stack.container.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def all_syncs_done(rows: list[dict[str, Any]]) -> bool:
    return bool(rows) and all(r["status"] == "succeeded" for r in rows)


def stored_event(stack: Stack, payment_id: str, event_type: str) -> dict[str, Any]:
    query = sa.select(provider_events).where(
        provider_events.c.payment_id == payment_id, provider_events.c.type == event_type
    )
    with stack.container.engine.connect() as conn:
        return dict(conn.execute(query).one()._mapping)


def deliver(stack: Stack, event: dict[str, Any]) -> httpx.Response:
    payload = json.dumps(event).encode()
    return httpx.post(
        stack.api_url + PATH,
        content=payload,
        headers={
            "Stripe-Signature": signature_header(payload, SECRET, int(time.time())),
            "Content-Type": "application/json",
        },
        trust_env=False,
    )


def test_a_dashboard_refund_appears_in_the_refunds_the_money_and_the_ledger_once(stack) -> None:
    accepted = stack.pay("dashboard-refunded", amount=2000)
    paid = stack.wait_final(accepted["id"])
    assert paid["status"] == "succeeded"
    payment_id, provider_payment_id = paid["id"], paid["provider_payment_id"]

    made = stack.simulator.admin.dashboard_refund(
        provider_payment_id, amount=700, reason="duplicate"
    )

    [refund] = poll("the dashboard refund is listed", lambda: refunds(stack, payment_id), bool)
    assert refund["origin"] == "provider"
    assert (refund["status"], refund["amount"], refund["currency"]) == ("succeeded", 700, "usd")
    assert refund["provider_refund_id"] == made["id"]
    assert refund["reason"] == "duplicate"
    with stack.client() as client:
        assert client.get(f"/v1/refunds/{refund['id']}").json() == refund
    # Both of the dashboard refund's events are in (so no later one can join a queued sync),
    # and every sync they queued is done.
    poll(
        "the refund's events stored",
        lambda: _types(stack, payment_id),
        lambda types: {"refund.created", "charge.refunded"} <= types,
    )
    poll("every sync finished", lambda: syncs(stack, payment_id), all_syncs_done)
    record = stack.record(payment_id)
    assert (record.amount_refunded, record.amount_refund_reserved) == (700, 700)
    assert stack.ledger_lines(payment_id) == 4 and stack.ledger_sum(payment_id) == 0
    assert outbox(stack, payment_id) == ["payment.succeeded", "refund.succeeded"]
    shown = stack.payment(payment_id)
    assert (shown["amount_refunded"], shown["latest_event_sequence"]) == (700, 2)
    before = (record, refunds(stack, payment_id), outbox(stack, payment_id))

    # The event replayed (same id): stored already, nothing changes.
    charge_refunded = stored_event(stack, payment_id, "charge.refunded")["payload"]
    replay = deliver(stack, charge_refunded)
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    # The same news under a new event id (Stripe's refund.created and charge.refunded for
    # one refund, or an event re-sent after an endpoint change): a new hint, a new sync,
    # and still one refund.
    renamed = deliver(stack, {**charge_refunded, "id": "evt_payorch_test_second_hint"})
    assert renamed.status_code == 200 and renamed.json()["duplicate"] is False
    poll(
        "the second hint's sync finished",
        lambda: syncs(stack, payment_id),
        lambda rows: (
            any("evt_payorch_test_second_hint" in (r["reason"] or "") for r in rows)
            and all_syncs_done(rows)
        ),
    )
    assert (stack.record(payment_id), refunds(stack, payment_id), outbox(stack, payment_id)) == (
        before
    )

    # A payorch refund of the rest: its own events are hints too, and it is never counted
    # twice (its provider refund carries our id).
    rest = stack.refund(payment_id, "the-rest")
    assert rest["amount"] == 1300 and rest["origin"] == "payorch"
    assert stack.wait_refund_final(rest["id"])["status"] == "succeeded"
    poll("every sync finished", lambda: syncs(stack, payment_id), all_syncs_done)
    listed = refunds(stack, payment_id)
    assert sorted((r["origin"], r["amount"]) for r in listed) == [
        ("payorch", 1300),
        ("provider", 700),
    ]
    record = stack.record(payment_id)
    assert (record.amount_refunded, record.amount_refund_reserved) == (2000, 2000)
    assert stack.ledger_sum(payment_id) == 0
    at_provider = stack.simulator.admin.movements()["refunds"]
    assert at_provider["by_intent"][provider_payment_id] == 2  # the dashboard's and payorch's
    assert at_provider["by_refund_id"] == {rest["id"]: 1}


def test_a_manual_payment_authenticated_later_settles_at_requires_capture_via_the_event(
    make_stack,
) -> None:
    # The re-check is an hour away: only the provider's event can settle it in time.
    with make_stack(action_recheck_seconds=3600, action_timeout_seconds=7200) as stack:
        accepted = stack.pay(
            "manual-3ds",
            payment_method="pm_card_threeDSecure2Required",
            capture_method="manual",
            off_session=False,
            return_url="https://shop.example/back",
        )
        payment_id = accepted["id"]
        waiting = poll(
            "requires_action",
            lambda: stack.payment(payment_id),
            lambda p: p["status"] == "requires_action",
        )

        # Let the requires_action event's own wake-up pass (it may arrive while the worker
        # holds the lease, which then ends its wait at once and re-reads): wait until the
        # payment waits with no holder and its re-check an hour away.  From then on only a
        # new event can wake it before the deadline.
        poll(
            "the wait settled",
            lambda: (_types(stack, payment_id), stack.record(payment_id)),
            lambda seen: "payment_intent.requires_action" in seen[0] and _settled_wait(seen[1]),
        )

        stack.simulator.admin.authenticate(waiting["provider_payment_id"])

        held = poll(
            "requires_capture",
            lambda: stack.payment(payment_id),
            lambda p: p["status"] == "requires_capture",
        )
        assert held["amount_capturable"] == 1000 and held["amount_captured"] == 0
        woke = {
            row["type"]: row["woke_payment"]
            for row in _events_of(stack, payment_id)
            if row["type"].startswith("payment_intent.")
        }
        # Stripe announces a manual intent's authorisation with this event (there is no
        # payment_intent.succeeded until the capture); it is what woke the waiting payment.
        assert "payment_intent.succeeded" not in woke
        assert woke["payment_intent.amount_capturable_updated"] is True
        assert "payment.requires_capture" in outbox(stack, payment_id)
        assert stack.movements(payment_id) == 1


def _events_of(stack: Stack, payment_id: str) -> list[dict[str, Any]]:
    query = sa.select(provider_events).where(provider_events.c.payment_id == payment_id)
    with stack.container.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def _settled_wait(record: PaymentRecord) -> bool:
    return (
        record.waiting_for is WaitingFor.CUSTOMER
        and record.lease_owner is None
        and record.next_attempt_at is not None
        and record.next_attempt_at > datetime.now(UTC) + timedelta(minutes=30)
    )


def _types(stack: Stack, payment_id: str) -> set[str]:
    return {row["type"] for row in _events_of(stack, payment_id)}


def test_an_operator_can_ask_for_a_sync_over_the_ops_api(stack) -> None:
    """The lost-event path over HTTP: the event was dropped, the operator asks."""
    stack.simulator.admin.add_fault("webhook:drop")
    accepted = stack.pay("dashboard-refund-lost-event", amount=1000)
    paid = stack.wait_final(accepted["id"])
    payment_id = paid["id"]
    stack.simulator.admin.dashboard_refund(paid["provider_payment_id"], amount=400)
    assert refunds(stack, payment_id) == []  # no event, no sync

    path = f"/v1/ops/payments/{payment_id}/sync_refunds"
    with stack.client(stack.ops_key) as ops:
        asked = ops.post(path, json={"reason": "Stripe shows a refund we lack"})
        assert ops.post(path, json={}).status_code == 400
        missing = ops.post(f"/v1/ops/payments/pay_{'0' * 32}/sync_refunds", json={"reason": "x"})
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("application/problem+json")
    with stack.client() as merchant:
        assert merchant.post(path, json={"reason": "x"}).status_code == 403

    assert asked.status_code == 202, asked.text
    body = asked.json()
    assert body["object"] == "refund_sync" and body["id"].startswith("rsy_")
    assert body["audit"]["action"] == "sync_refunds"
    [refund] = poll("the refund is recorded", lambda: refunds(stack, payment_id), bool)
    assert (refund["origin"], refund["amount"], refund["status"]) == ("provider", 400, "succeeded")
    assert stack.payment(payment_id)["amount_refunded"] == 400
    assert stack.ledger_sum(payment_id) == 0
