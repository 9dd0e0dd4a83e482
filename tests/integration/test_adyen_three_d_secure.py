"""3-D Secure at Adyen, end to end in this process on SQLite and PostgreSQL: the API accepts,
the engine authorises through the Adyen adapter, the simulator (over real HTTP, every body
checked against Checkout v71) asks for a challenge, the merchant sends the shopper's result
to ``POST /v1/payments/{id}/details``, and the engine forwards it to ``/payments/details``.
The property: one authorisation per payment, the result forwarded under one derived key
whatever the network did, and every refusal a problem that says what to fix."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.api_keys import create_client
from tests.integration.adyen_simulator_helpers import Checkout
from tests.integration.test_adyen_payments import Stack, adyen_stack

# A stored 3DS2-enrolled test card (the simulator names stored cards by their test number):
# a shopper-present payment with it is challenged.
THREE_DS_CARD = "4917610000000000"


@pytest.fixture
def stack(database_url: str) -> Iterator[Stack]:
    with adyen_stack(database_url) as built:
        yield built


def run_latest(stack: Stack, payment_id: str) -> ProcessResult:
    """Run the payment under the token of its latest wake-up (the accept's, then the
    details request's), its backoffs not slept out."""
    token = [t for r, t in stack.publisher.published if r == payment_id][-1]
    return process_operation(
        stack.container.runner(),
        payment_id,
        token,
        owner="test",
        sleep=lambda seconds: None,
        rng=random.Random(3),
    )


def challenged(stack: Stack, key: str) -> dict[str, Any]:
    """A payment that waits for the shopper's 3-D Secure challenge."""
    payment = stack.pay(key, payment_method=THREE_DS_CARD)
    assert run_latest(stack, payment["id"]) is ProcessResult.WAITING
    shown = stack.shown(payment["id"])
    assert shown["status"] == "requires_action", shown
    return shown


def send_details(stack: Stack, payment_id: str, body: Any) -> httpx.Response:
    with stack.client() as client:
        return client.post(f"/v1/payments/{payment_id}/details", json=body)


def shopper_result(stack: Stack, shown: dict[str, Any], *, succeed: bool = True) -> str:
    token = shown["next_action"]["adyen_action"]["authorisationToken"]
    return stack.adyen.admin.three_ds_result(token, succeed=succeed)


def details_keys(stack: Stack) -> list[str]:
    return [
        r["idempotency_key"]
        for r in stack.adyen.admin.requests()
        if r["path"].endswith("/payments/details")
    ]


def test_a_challenged_payment_shows_adyens_action_and_succeeds_on_the_shoppers_result(
    stack: Stack,
) -> None:
    shown = challenged(stack, "3ds-1")
    action = shown["next_action"]
    assert action["type"] == "adyen_action"
    assert action["adyen_action"]["type"] == "threeDS2"
    assert action["adyen_action"]["subtype"] == "challenge"

    answer = send_details(
        stack, shown["id"], {"details": {"threeDSResult": shopper_result(stack, shown)}}
    )

    assert answer.status_code == 202, answer.text
    assert answer.headers["Location"] == f"/v1/payments/{shown['id']}"
    assert answer.json()["status"] == "requires_action"  # forwarded by the worker, not here
    assert details_keys(stack) == []
    assert run_latest(stack, shown["id"]) is ProcessResult.COMPLETED
    settled = stack.shown(shown["id"])
    assert settled["status"] == "succeeded"
    assert settled["next_action"] is None
    assert len(stack.authorisations(shown["id"])) == 1
    assert details_keys(stack) == [f"payorch-{shown['id']}-details-1"]


def test_a_failed_authentication_fails_the_payment_with_adyens_refusal(stack: Stack) -> None:
    shown = challenged(stack, "3ds-2")

    result = shopper_result(stack, shown, succeed=False)
    assert (
        send_details(stack, shown["id"], {"details": {"threeDSResult": result}}).status_code == 202
    )
    run_latest(stack, shown["id"])

    settled = stack.shown(shown["id"])
    assert settled["status"] == "failed"
    assert settled["failure"]["code"] == "3d_not_authenticated"
    assert stack.authorisations(shown["id"]) == []


def test_a_details_answer_lost_after_the_effect_is_resolved_by_replaying_its_key(
    stack: Stack,
) -> None:
    shown = challenged(stack, "3ds-3")
    stack.adyen.admin.add_fault("details:timeout_after_effect:times=1")

    result = shopper_result(stack, shown)
    assert (
        send_details(stack, shown["id"], {"details": {"threeDSResult": result}}).status_code == 202
    )
    run_latest(stack, shown["id"])

    assert stack.shown(shown["id"])["status"] == "succeeded"
    assert len(stack.authorisations(shown["id"])) == 1
    keys = details_keys(stack)
    assert len(keys) >= 2  # the lost one, then its replay
    assert set(keys) == {f"payorch-{shown['id']}-details-1"}


def test_the_same_result_sent_twice_is_forwarded_once_under_one_key(stack: Stack) -> None:
    shown = challenged(stack, "3ds-4")
    body = {"details": {"threeDSResult": shopper_result(stack, shown)}}

    first = send_details(stack, shown["id"], body)
    retry = send_details(stack, shown["id"], body)
    run_latest(stack, shown["id"])
    after = send_details(stack, shown["id"], body)

    assert (first.status_code, retry.status_code, after.status_code) == (202, 200, 200)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert after.json()["status"] == "succeeded"
    assert details_keys(stack) == [f"payorch-{shown['id']}-details-1"]
    assert len(stack.authorisations(shown["id"])) == 1


def test_another_result_while_one_is_being_forwarded_is_409_and_not_stored(stack: Stack) -> None:
    shown = challenged(stack, "3ds-5")
    result = shopper_result(stack, shown)
    assert (
        send_details(stack, shown["id"], {"details": {"threeDSResult": result}}).status_code == 202
    )

    other = send_details(stack, shown["id"], {"details": {"redirectResult": "X3XtfGC9!H4s"}})

    assert other.status_code == 409
    assert other.json()["type"].endswith("/action-result-in-progress")
    run_latest(stack, shown["id"])
    assert details_keys(stack) == [f"payorch-{shown['id']}-details-1"]


def test_details_for_a_payment_that_is_not_requires_action_is_409_naming_its_status(
    stack: Stack,
) -> None:
    payment = stack.pay("3ds-6")  # a stored card without 3-D Secure
    run_latest(stack, payment["id"])

    answer = send_details(stack, payment["id"], {"details": {"threeDSResult": "eyJ9"}})

    assert answer.status_code == 409
    problem = answer.json()
    assert problem["type"].endswith("/payment-not-awaiting-action")
    assert problem["payment_status"] == "succeeded"
    assert "succeeded" in problem["detail"]
    assert details_keys(stack) == []


def test_details_for_an_unknown_payment_or_another_merchants_is_404(stack: Stack) -> None:
    shown = challenged(stack, "3ds-7")
    body = {"details": {"threeDSResult": shopper_result(stack, shown)}}
    other = create_client(stack.container.uow, "other merchant", Role.MERCHANT)
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {other.api_key}"}, trust_env=False
    ) as client:
        foreign = client.post(f"/v1/payments/{shown['id']}/details", json=body)
    unknown = send_details(stack, "pay_" + "0" * 26, body)

    assert foreign.status_code == 404, foreign.text
    assert unknown.status_code == 404, unknown.text
    assert foreign.json()["type"].endswith("/not-found")
    assert stack.shown(shown["id"])["status"] == "requires_action"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "details"),
        ({"details": {}}, "details"),
        ({"details": {"threeDSResult": 7}}, "details.threeDSResult"),
        ({"details": {"cardNumber": "4111"}}, "details"),
        ({"details": {"threeDSResult": "x"}, "amount": 100}, "amount"),
        ({"details": {"threeDSResult": "x" * 50_001}}, "details.threeDSResult"),
    ],
)
def test_a_body_not_in_adyens_details_shape_is_400_naming_the_field(
    stack: Stack, body: dict[str, Any], field: str
) -> None:
    shown = challenged(stack, f"3ds-8-{field}-{len(str(body))}")

    answer = send_details(stack, shown["id"], body)

    assert answer.status_code == 400, answer.text
    assert field in [e["field"] for e in answer.json()["errors"]]
    assert stack.shown(shown["id"])["status"] == "requires_action"


def test_the_operators_page_shows_the_forward_with_its_key_and_the_charges_count(
    stack: Stack,
) -> None:
    shown = challenged(stack, "3ds-9")
    body = {"details": {"threeDSResult": shopper_result(stack, shown)}}
    assert send_details(stack, shown["id"], body).status_code == 202
    run_latest(stack, shown["id"])
    ops = create_client(stack.container.uow, "ops", Role.OPS)

    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {ops.api_key}"}, trust_env=False
    ) as client:
        detail = client.get(f"/v1/ops/payments/{shown['id']}")

    assert detail.status_code == 200, detail.text
    calls = [
        (c["operation"], c["method"], c["path"], c["idempotency_key"], c["provider_status"])
        for c in detail.json()["provider_calls"]
        if c["operation"] == "details"
    ]
    assert calls == [
        ("details", "POST", "/payments/details", f"payorch-{shown['id']}-details-1", "succeeded")
    ]
    [charge] = [o for o in detail.json()["operations"] if o["kind"] == "charge"]
    assert (charge["action_result_attempts"], charge["action_result_pending"]) == (1, False)


def test_a_shopper_who_never_comes_back_ends_canceled_with_nothing_sent_to_adyen(
    stack: Stack,
) -> None:
    shown = challenged(stack, "3ds-10")
    timeout = stack.container.settings.action_timeout_seconds
    # The customer's time runs out: the wait began longer ago than the timeout, and the
    # re-check is due (the database clock is the engine's, so the row is moved instead).
    with stack.container.engine.begin() as conn:
        since, token = conn.execute(
            sa.select(payments.c.waiting_since, payments.c.lease_token).where(
                payments.c.id == shown["id"]
            )
        ).one()
        expired = since - dt.timedelta(seconds=timeout + 1)
        conn.execute(
            sa.update(payments)
            .where(payments.c.id == shown["id"])
            .values(waiting_since=expired, next_attempt_at=expired)
        )

    result = process_operation(
        stack.container.runner(), shown["id"], token, owner="test", sleep=lambda s: None
    )

    assert result is ProcessResult.COMPLETED
    ended = stack.shown(shown["id"])
    assert (ended["status"], ended["failure"]["code"]) == ("canceled", "authentication_timeout")
    sent = [r["path"] for r in stack.adyen.admin.requests()]
    assert [p for p in sent if not p.endswith("/payments")] == []  # no cancel, no details
    assert stack.authorisations(shown["id"]) == []
    late = send_details(
        stack, shown["id"], {"details": {"threeDSResult": shopper_result(stack, shown)}}
    )
    assert late.status_code == 409
    assert late.json()["payment_status"] == "canceled"


def test_a_run_that_died_after_the_answer_reads_it_back_by_replaying_the_forward(
    stack: Stack,
) -> None:
    # The recovery point between "answered" and the finish: the forward reached Adyen under
    # its key and its answer was recorded as received, then the worker died before settling.
    shown = challenged(stack, "3ds-11")
    body = {"details": {"threeDSResult": shopper_result(stack, shown)}}
    key = f"payorch-{shown['id']}-details-1"
    checkout = Checkout(stack.adyen.checkout_url)
    try:
        assert checkout.post("/payments/details", body, key=key).status_code == 200
    finally:
        checkout.close()
    with stack.container.engine.begin() as conn:
        now, token = conn.execute(
            sa.select(payments.c.updated_at, payments.c.lease_token).where(
                payments.c.id == shown["id"]
            )
        ).one()
        conn.execute(
            sa.update(payments)
            .where(payments.c.id == shown["id"])
            .values(
                action_result=body,
                action_result_attempts=1,
                action_result_pending=False,
                next_attempt_at=now,
            )
        )

    result = process_operation(
        stack.container.runner(), shown["id"], token, owner="test", sleep=lambda s: None
    )

    assert result is ProcessResult.COMPLETED
    assert stack.shown(shown["id"])["status"] == "succeeded"
    assert len(stack.authorisations(shown["id"])) == 1
    assert set(details_keys(stack)) == {key}
    assert len(details_keys(stack)) == 2  # the one that "died", then the read's replay
