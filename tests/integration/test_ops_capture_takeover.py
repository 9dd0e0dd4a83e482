"""Operators act on capture and cancel leases with the same ops API as any other (over real
HTTP, SQLite and PostgreSQL): an expired capture lease is listed with its kind, taken over
by its ``cap_`` id with an audit row, the stale holder is fenced and the provider captures
once; a parked cancel is retried by its ``cnl_`` id; an authorised payment's own charge is
finished and refuses a takeover."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.captures import accept_cancel, accept_capture
from tests.harness.captures import authorized_payment, cancel_fingerprint, capture_fingerprint
from tests.harness.refunds import force_operation, reload_operation
from tests.harness.seeds import reload
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.webhook_helpers import client_of


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _run(api: Api, operation_id: str, token: int) -> ProcessResult:
    return process_operation(
        api.container.runner(),
        operation_id,
        token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(2),
    )


def test_an_operator_takes_over_an_expired_capture_lease_and_the_old_holder_is_fenced(
    api: Api,
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1200)
    c = api.container
    capture = accept_capture(
        c.uow,
        c.publisher,
        c.settings,
        merchant,
        payment.id,
        "cap-1",
        None,
        capture_fingerprint(payment.id, None),
    ).record
    with c.uow() as uow:
        now = uow.now()
    stale = force_operation(
        c, capture.id, lease_owner="worker-gone", locked_until=now - timedelta(seconds=5)
    )

    with api.client(api.ops_key) as ops:
        listed = ops.get("/v1/ops/leases", params={"state": "expired"})
        charge = ops.post(f"/v1/ops/payments/{payment.id}/takeover", json={"reason": "x"})
        taken = ops.post(
            f"/v1/ops/payments/{capture.id}/takeover", json={"reason": "capture worker died"}
        )
        audit = ops.get("/v1/ops/audit", params={"payment_id": payment.id})

    assert listed.status_code == 200, listed.text
    [row] = [r for r in listed.json()["data"] if r.get("operation_id") == capture.id]
    assert row["kind"] == "capture"
    # The authorised payment's charge is finished: nothing of it to take over.
    assert charge.status_code == 409, charge.text
    assert taken.status_code == 200, taken.text
    body = taken.json()
    assert (body["old_token"], body["new_token"]) == (stale.lease_token, stale.lease_token + 1)
    [entry] = [e for e in audit.json()["data"] if e.get("operation_id") == capture.id]
    assert entry["reason"] == "capture worker died" and entry["action"] == "takeover"

    assert _run(api, capture.id, stale.lease_token) is ProcessResult.NOT_CLAIMED
    assert api.provider.captures == {}
    assert _run(api, capture.id, body["new_token"]) is ProcessResult.COMPLETED
    assert api.provider.captures == {payment.provider_payment_id: 1}
    assert reload(c, payment.id).status is PaymentStatus.SUCCEEDED


def test_a_parked_cancel_is_listed_and_retried_by_its_id_and_cancels_once(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    c = api.container
    payment = authorized_payment(c, merchant, "order-2", amount=900)
    cancel = accept_cancel(
        c.uow,
        c.publisher,
        c.settings,
        merchant,
        payment.id,
        "cnl-1",
        None,
        cancel_fingerprint(payment.id, None),
    ).record
    # The cancel ran out of attempts (as if every call and read had timed out).
    force_operation(
        c,
        cancel.id,
        status="needs_attention",
        lease_owner=None,
        locked_until=None,
        last_error="OutcomeUnknown: read timeout",
    )
    parked = reload_operation(c, cancel.id)
    assert parked.status is OperationStatus.NEEDS_ATTENTION

    with api.client(api.ops_key) as ops:
        listed = ops.get("/v1/ops/leases", params={"state": "needs_attention"})
        retried = ops.post(
            f"/v1/ops/payments/{cancel.id}/retry", json={"reason": "provider incident over"}
        )
    [row] = [r for r in listed.json()["data"] if r.get("operation_id") == cancel.id]
    assert row["kind"] == "cancel"
    assert retried.status_code == 200, retried.text

    assert _run(api, cancel.id, retried.json()["new_token"]) is ProcessResult.COMPLETED
    assert reload(c, payment.id).status is PaymentStatus.CANCELED
    intent = api.provider.provider_payments[payment.provider_payment_id]
    assert intent.status == "canceled"
