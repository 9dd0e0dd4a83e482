"""An operator captures or cancels a payment: ``POST /v1/ops/payments/{id}/capture|cancel``
and the console's forms on the payment page, which call the same service
(``ops.captures``) — over real HTTP, SQLite and PostgreSQL, the fake provider.

Each needs an ops key (the console: its session and CSRF token) and a reason, writes the
audit row with the operation in one transaction, and refuses what the merchant's API
refuses with the same problem (nothing stored, no audit row)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import closing

import pytest

from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from tests.harness.captures import authorized_payment
from tests.harness.refunds import operation_count, reload_operation
from tests.harness.seeds import reload
from tests.integration.console_helpers import post_form, signed_in
from tests.integration.hardening_helpers import Api, assert_problem, running_api
from tests.integration.webhook_helpers import client_of


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _run(api: Api, operation_id: str) -> None:
    record = reload_operation(api.container, operation_id)
    result = process_operation(
        api.container.runner(),
        record.id,
        record.lease_token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(1),
    )
    assert result is ProcessResult.COMPLETED


def _audit(api: Api, payment_id: str):
    with api.container.uow() as uow:
        return uow.audit.list(payment_id=payment_id)


def test_the_ops_api_captures_part_of_a_payment_for_its_merchant_with_an_audited_reason(
    api: Api,
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1200)
    path = f"/v1/ops/payments/{payment.id}/capture"
    with api.client(api.ops_key) as ops, api.client() as merchant_http:
        no_reason = ops.post(path, json={"amount": 500, "reason": " "})
        too_much = ops.post(path, json={"amount": 5000, "reason": "phone order"})
        as_merchant = merchant_http.post(path, json={"reason": "not mine to do"})
        accepted = ops.post(path, json={"amount": 500, "reason": "merchant asked by phone"})
        again = ops.post(path, json={"reason": "double click"})

    assert_problem(no_reason, 400, "invalid-request")
    assert_problem(too_much, 400, "capture-exceeds-capturable")
    assert as_merchant.status_code == 403
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    operation = body["operation"]
    assert operation["id"].startswith("cap_") and operation["amount"] == 500
    assert accepted.headers["Location"] == f"/v1/captures/{operation['id']}"
    assert body["payment"]["status"] == "requires_capture"
    assert body["audit"]["action"] == "capture"
    assert body["audit"]["reason"] == "merchant asked by phone"
    assert_problem(again, 409, "operation-in-progress")
    # Refusals stored nothing: one operation, one audit row.
    assert operation_count(api.container, payment.id) == 1
    [entry] = _audit(api, payment.id)
    assert entry.operation_id == operation["id"] and entry.actor_name == "operator"

    _run(api, operation["id"])
    captured = reload(api.container, payment.id)
    assert captured.status is PaymentStatus.SUCCEEDED and captured.amount_captured == 500
    # It is the merchant's capture: the merchant reads it.
    with api.client() as merchant_http:
        read = merchant_http.get(f"/v1/captures/{operation['id']}")
    assert read.status_code == 200 and read.json()["status"] == "succeeded"


def test_the_ops_api_cancels_and_refuses_what_the_merchant_api_refuses(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=800)
    path = f"/v1/ops/payments/{payment.id}/cancel"
    with api.client(api.ops_key) as ops:
        bad_reason = ops.post(path, json={"reason": "x", "cancellation_reason": "bored"})
        accepted = ops.post(
            path, json={"reason": "fraud team", "cancellation_reason": "fraudulent"}
        )
        missing = ops.post("/v1/ops/payments/pay_doesnotexist/cancel", json={"reason": "x"})
    assert_problem(bad_reason, 400, "invalid-request")
    assert_problem(missing, 404, "not-found")
    assert accepted.status_code == 202, accepted.text
    operation_id = accepted.json()["operation"]["id"]
    assert operation_id.startswith("cnl_")
    _run(api, operation_id)
    assert reload(api.container, payment.id).status is PaymentStatus.CANCELED
    with api.client(api.ops_key) as ops:
        late = ops.post(f"/v1/ops/payments/{payment.id}/capture", json={"reason": "too late"})
    assert_problem(late, 409, "payment-not-capturable")
    assert [e.action for e in _audit(api, payment.id)] == ["cancel"]


def test_the_console_capture_form_needs_the_csrf_token_and_a_reason_and_is_audited(
    api: Api,
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1500)
    path = f"/ops/payments/{payment.id}/capture"
    client, token = signed_in(api)
    with closing(client):
        page = client.get(f"/ops/payments/{payment.id}")
        for forged in (None, "", "wrong"):
            answer = post_form(client, path, csrf_token=forged, reason="forged")
            assert answer.status_code == 403
        no_reason = post_form(client, path, csrf_token=token, reason="  ")
        too_much = post_form(client, path, csrf_token=token, amount="9999", reason="typo")
        not_a_number = post_form(client, path, csrf_token=token, amount="12.5", reason="typo")
        done = post_form(client, path, csrf_token=token, amount="1000", reason="call #4711")
        shown = client.get(done.headers["location"])

    assert page.status_code == 200
    assert 'id="capture-form"' in page.text and 'id="cancel-form"' in page.text
    assert no_reason.status_code == 400 and "reason" in no_reason.text
    assert too_much.status_code == 400 and "1500" in too_much.text
    assert not_a_number.status_code == 400
    assert operation_count(api.container, payment.id) == 1
    assert done.status_code == 303
    assert done.headers["location"].startswith(f"/ops/payments/{payment.id}?done=")
    [entry] = _audit(api, payment.id)
    assert (entry.action, entry.reason) == ("capture", "call #4711")
    assert "call #4711" in shown.text and entry.operation_id in shown.text
    # The page lists the capture; once it ran, the payment succeeded and the forms are gone.
    assert entry.operation_id is not None
    _run(api, entry.operation_id)
    client, _token = signed_in(api)
    with closing(client):
        after = client.get(f"/ops/payments/{payment.id}")
    assert 'id="payment-status">succeeded' in after.text
    assert 'id="capture-form"' not in after.text and 'class="capture-row"' in after.text
    assert reload(api.container, payment.id).amount_captured == 1000


def test_the_console_cancel_form_cancels_and_a_refused_one_shows_why(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=900)
    path = f"/ops/payments/{payment.id}/cancel"
    client, token = signed_in(api)
    with closing(client):
        done = post_form(
            client,
            path,
            csrf_token=token,
            cancellation_reason="requested_by_customer",
            reason="customer called",
        )
        busy = post_form(client, path, csrf_token=token, reason="second operator")
    assert done.status_code == 303
    assert busy.status_code == 409 and "has not finished" in busy.text
    [entry] = _audit(api, payment.id)
    assert entry.operation_id is not None
    assert reload_operation(api.container, entry.operation_id).reason == "requested_by_customer"
    _run(api, entry.operation_id)
    assert reload(api.container, payment.id).status is PaymentStatus.CANCELED


@pytest.mark.parametrize("typed", ["²", "١٢٣", "9" * 5000, "0", "-5", "1e3"])
def test_the_console_capture_form_answers_a_form_error_to_an_amount_that_is_not_ascii_digits(
    api: Api, typed: str
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1500)
    client, token = signed_in(api)
    with closing(client):
        refused = post_form(
            client,
            f"/ops/payments/{payment.id}/capture",
            csrf_token=token,
            amount=typed,
            reason="typo",
        )

    assert refused.status_code == 400
    assert "whole number of minor units" in refused.text
    assert operation_count(api.container, payment.id) == 0
