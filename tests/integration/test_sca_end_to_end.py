"""Issue 12's acceptance: 3-D Secure and provider events end to end, with real PostgreSQL,
RabbitMQ, ``payorch worker`` and ``payorch sweeper`` processes, the API, and the simulator
delivering Stripe-signed webhooks to it (with faults).

What is asserted is behaviour, never timing: a setting is made small or large so that only
the path under test (the event, or the re-check) can settle a payment before the deadline
of a wait that polls a condition."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator.webhooks import signature_header
from orchestrator.db.tables import outbox_events, provider_events
from tests.harness.stack import Stack, running_stack
from tests.integration.simulator_helpers import make_provider

SECRET = "whsec_payorch_sca_end_to_end"
PATH = "/v1/providers/stripe/webhooks"
THREE_DS = "pm_card_threeDSecure2Required"
ON_SESSION = {"off_session": False, "return_url": "https://shop.example/back"}


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
        ) as stack:
            stack.simulator.admin.configure_webhooks(stack.api_url + PATH, SECRET)
            stack.start_sweeper(processes)
            stack.start_worker(processes)
            yield stack

    return build


def wait_for(
    stack: Stack, payment_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        payment = stack.payment(payment_id)
        if check(payment):
            return payment
        assert time.monotonic() < deadline, f"condition never held: {payment}"
        time.sleep(0.2)


def requires_action(stack: Stack, payment_id: str) -> dict[str, Any]:
    return wait_for(stack, payment_id, lambda p: p["status"] == "requires_action")


def ops_detail(stack: Stack, payment_id: str) -> dict[str, Any]:
    with stack.client(stack.ops_key) as client:
        response = client.get(f"/v1/ops/payments/{payment_id}")
    assert response.status_code == 200, response.text
    detail: dict[str, Any] = response.json()
    return detail


def stored_events(stack: Stack, payment_id: str) -> list[dict[str, Any]]:
    query = sa.select(provider_events).where(provider_events.c.payment_id == payment_id)
    with stack.container.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def outbox(stack: Stack, payment_id: str) -> list[str]:
    query = (
        sa.select(outbox_events.c.event_type)
        .where(outbox_events.c.payment_id == payment_id)
        .order_by(outbox_events.c.id)
    )
    with stack.container.engine.connect() as conn:
        return list(conn.execute(query).scalars())


def test_an_authenticated_3ds_payment_succeeds_through_the_event_and_is_charged_once(
    make_stack,
) -> None:
    # The re-check is an hour away: only the provider's event can settle it in time.
    with make_stack(action_recheck_seconds=3600, action_timeout_seconds=7200) as stack:
        accepted = stack.pay("3ds-event", payment_method=THREE_DS, **ON_SESSION)
        waiting = requires_action(stack, accepted["id"])
        assert waiting["next_action"]["type"] == "redirect_to_url"
        assert waiting["next_action"]["redirect_to_url"]["return_url"] == ON_SESSION["return_url"]
        assert waiting["client_secret"].startswith(waiting["provider_payment_id"])
        # No lease while waiting.  The provider's requires_action event may wake the payment
        # once (a dispatch and a worker re-read it, then it waits again), so wait for the
        # wait to settle instead of reading at one instant.
        deadline = time.monotonic() + 60
        while True:
            [charge] = ops_detail(stack, accepted["id"])["operations"]
            if (charge["waiting_for"], charge["lease_owner"]) == ("customer", None):
                break
            assert time.monotonic() < deadline, charge
            time.sleep(0.2)

        stack.simulator.admin.authenticate(waiting["provider_payment_id"])
        final = stack.wait_final(accepted["id"])

        assert final["status"] == "succeeded"
        assert final["next_action"] is None and final["client_secret"] is None
        assert stack.movements(accepted["id"]) == 1
        assert stack.ledger_sum(accepted["id"]) == 0
        types = {e["type"] for e in stored_events(stack, accepted["id"])}
        assert "payment_intent.succeeded" in types
        assert outbox(stack, accepted["id"]) == ["payment.requires_action", "payment.succeeded"]


def test_with_every_webhook_dropped_the_recheck_settles_the_payment(make_stack) -> None:
    with make_stack(action_recheck_seconds=1, action_timeout_seconds=3600) as stack:
        stack.simulator.admin.add_fault("webhook:drop")
        accepted = stack.pay("3ds-dropped", payment_method=THREE_DS, **ON_SESSION)
        waiting = requires_action(stack, accepted["id"])

        stack.simulator.admin.authenticate(waiting["provider_payment_id"])
        final = stack.wait_final(accepted["id"])

        assert final["status"] == "succeeded"
        assert stored_events(stack, accepted["id"]) == []  # no event: the re-check did it
        assert stack.movements(accepted["id"]) == 1


def test_an_abandoned_authentication_ends_canceled_and_the_intent_is_canceled_at_the_provider(
    make_stack,
) -> None:
    with make_stack(action_recheck_seconds=1, action_timeout_seconds=3) as stack:
        accepted = stack.pay("3ds-abandoned", payment_method=THREE_DS, **ON_SESSION)
        waiting = requires_action(stack, accepted["id"])

        final = stack.wait_final(accepted["id"])

        assert final["status"] == "canceled"
        assert final["failure"]["code"] == "authentication_timeout"
        with make_provider(stack.simulator.url) as provider:
            intent = provider.retrieve_payment(waiting["provider_payment_id"])
        assert (intent.status, intent.cancellation_reason) == ("canceled", "abandoned")
        assert stack.movements(accepted["id"]) == 0
        assert stack.ledger_lines(accepted["id"]) == 0
        assert outbox(stack, accepted["id"]) == ["payment.requires_action", "payment.canceled"]


def test_off_session_with_a_card_that_needs_authentication_fails_at_once(make_stack) -> None:
    with make_stack() as stack:
        accepted = stack.pay("3ds-off-session", payment_method=THREE_DS, off_session=True)

        final = stack.wait_final(accepted["id"])

        assert final["status"] == "failed"
        assert final["failure"]["code"] == "authentication_required"
        assert stack.movements(accepted["id"]) == 0
        assert outbox(stack, accepted["id"]) == ["payment.failed"]


def test_an_asynchronous_method_stays_processing_without_parking_until_its_event(
    make_stack,
) -> None:
    # The slow re-check is an hour away: the provider's event settles it.
    with make_stack(processing_recheck_seconds=3600) as stack:
        accepted = stack.pay("async-method", payment_method="pm_card_sim_processingSucceeds")
        record = stack.wait_for_record(
            accepted["id"], lambda r: r.waiting_for is not None, timeout=60
        )
        assert record.waiting_for.value == "provider" and record.lease_owner is None
        assert stack.payment(accepted["id"])["status"] == "processing"

        assert record.provider_payment_id is not None
        stack.simulator.admin.settle_intent(record.provider_payment_id)
        final = stack.wait_final(accepted["id"])

        assert final["status"] == "succeeded"
        assert stack.movements(accepted["id"]) == 1
        assert stack.record(accepted["id"]).unknown_outcomes == 0


def test_a_replayed_event_is_answered_200_and_changes_nothing(make_stack) -> None:
    with make_stack() as stack:
        accepted = stack.pay("replayed", payment_method=THREE_DS, **ON_SESSION)
        waiting = requires_action(stack, accepted["id"])
        stack.simulator.admin.authenticate(waiting["provider_payment_id"])
        final = stack.wait_final(accepted["id"])
        [succeeded] = [
            e
            for e in stored_events(stack, accepted["id"])
            if e["type"] == "payment_intent.succeeded"
        ]
        before = (stack.record(accepted["id"]), outbox(stack, accepted["id"]))

        payload = json.dumps(succeeded["payload"]).encode()
        header = signature_header(payload, SECRET, int(time.time()))
        response = httpx.post(
            stack.api_url + PATH,
            content=payload,
            headers={"Stripe-Signature": header, "Content-Type": "application/json"},
        )

        assert response.status_code == 200
        assert response.json()["duplicate"] is True
        assert (stack.record(accepted["id"]), outbox(stack, accepted["id"])) == before
        assert stack.payment(accepted["id"]) == final
        assert stack.movements(accepted["id"]) == 1


# The 200: about three minutes on this two-core machine shared by five sessions
# (each 3-D Secure payment is several provider round trips and webhook deliveries).
MANY = 200


def test_many_payments_with_every_event_duplicated_and_reordered_end_as_the_simulator_says(
    make_stack,
) -> None:
    with make_stack(action_recheck_seconds=2, action_timeout_seconds=3600) as stack:
        stack.simulator.admin.add_fault("webhook:duplicate")
        stack.simulator.admin.add_fault("webhook:reorder")
        cards = [THREE_DS, "pm_card_visa", "pm_card_chargeDeclined", THREE_DS]
        accepted = [
            stack.pay(
                f"many-{i}",
                amount=1000 + i,
                payment_method=cards[i % len(cards)],
                **(ON_SESSION if cards[i % len(cards)] == THREE_DS else {}),
            )
            for i in range(MANY)
        ]
        # The customers: every third authentication fails, the others succeed.
        three_ds = [a for i, a in enumerate(accepted) if cards[i % len(cards)] == THREE_DS]
        for n, payment in enumerate(three_ds):
            intent = requires_action(stack, payment["id"])["provider_payment_id"]
            stack.simulator.admin.authenticate(intent, succeed=n % 3 != 0)

        finals = {a["id"]: stack.wait_final(a["id"], timeout=120) for a in accepted}

        by_record = stack.simulator.admin.movements()["by_record"]
        assert all(n == 1 for n in by_record.values()), "a payment was charged twice"
        for payment_id, final in finals.items():
            moved = by_record.get(payment_id, 0)
            assert (final["status"] == "succeeded") == (moved == 1), final
            assert final["status"] in ("succeeded", "failed"), final
            assert stack.ledger_sum(payment_id) == 0
            assert outbox(stack, payment_id).count(f"payment.{final['status']}") == 1
        succeeded = [f for f in finals.values() if f["status"] == "succeeded"]
        assert len(succeeded) == sum(by_record.values())
        assert any(f["status"] == "failed" for f in finals.values())
