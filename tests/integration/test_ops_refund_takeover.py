"""Operators act on a refund's lease with the same ops API as a charge's (over real HTTP,
SQLite and PostgreSQL): an expired refund lease is listed with its kind, taken over by its
``rfd_`` id with a reason and an audit row, the stale holder is fenced, and the new holder
refunds once."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from orchestrator.domain.operations import OperationStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from tests.harness.refunds import (
    force_operation,
    reload_operation,
    request_refund,
    succeeded_payment,
)
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


def test_an_operator_takes_over_an_expired_refund_lease_and_the_old_holder_is_fenced(
    api: Api,
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = succeeded_payment(api.container, merchant, "order-1", amount=1200)
    refund = request_refund(api.container, merchant, payment.id, "refund-1", amount=400).record
    with api.container.uow() as uow:
        now = uow.now()
    stale = force_operation(
        api.container, refund.id, lease_owner="worker-gone", locked_until=now - timedelta(seconds=5)
    )

    with api.client(api.ops_key) as ops:
        listed = ops.get("/v1/ops/leases", params={"state": "expired"})
        taken = ops.post(
            f"/v1/ops/payments/{refund.id}/takeover", json={"reason": "refund worker died"}
        )
        audit = ops.get("/v1/ops/audit", params={"payment_id": payment.id})

    assert listed.status_code == 200, listed.text
    [row] = [r for r in listed.json()["data"] if r.get("operation_id") == refund.id]
    assert row["kind"] == "refund"
    assert taken.status_code == 200, taken.text
    body = taken.json()
    assert (body["old_token"], body["new_token"]) == (stale.lease_token, stale.lease_token + 1)
    assert audit.status_code == 200, audit.text
    [entry] = [e for e in audit.json()["data"] if e.get("operation_id") == refund.id]
    assert entry["reason"] == "refund worker died" and entry["action"] == "takeover"

    # The stale holder's token no longer claims anything; the new one refunds once.
    assert _run(api, refund.id, stale.lease_token) is ProcessResult.NOT_CLAIMED
    assert api.provider.refunds_of(refund.id) == []
    assert _run(api, refund.id, body["new_token"]) is ProcessResult.COMPLETED
    assert [r.amount for r in api.provider.refunds_of(refund.id)] == [400]
    assert reload_operation(api.container, refund.id).status is OperationStatus.SUCCEEDED


def test_a_merchant_key_cannot_take_over_a_refund(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = succeeded_payment(api.container, merchant, "order-2", amount=900)
    refund = request_refund(api.container, merchant, payment.id, "refund-2").record
    with api.client() as client:
        refused = client.post(
            f"/v1/ops/payments/{refund.id}/takeover", json={"reason": "x", "force": True}
        )
    assert refused.status_code == 403
    assert reload_operation(api.container, refund.id).lease_token == refund.lease_token
