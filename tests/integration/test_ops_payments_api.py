"""``GET /v1/ops/payments/{id}``, ``GET /v1/ops/payments`` and ``GET /v1/ops/status`` over
real HTTP on SQLite and PostgreSQL (issue 15): what happened to a payment, every payment by
filter and cursor, and what is stuck."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.engine.kinds.charge import process_payment
from tests.harness.seeds import accept, finish_with_token, force, reload
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.lease_helpers import expire_leases

PROBLEM_JSON = "application/problem+json"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url, lease_seconds=60.0) as running:
        yield running


def _client(api: Api, client_id: str) -> ApiClient:
    with api.container.uow() as uow:
        client = uow.clients.get(client_id)
    assert client is not None
    return client


def _get(api: Api, path: str, **params: Any) -> Any:
    with api.client(api.ops_key) as client:
        response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def _claimed(api: Api, key: str, owner: str = "worker-9:99") -> PaymentRecord:
    record = accept(api.container, _client(api, api.client_a_id), key)
    with api.container.uow() as uow:
        now = uow.now()
        claimed = uow.leases.claim(
            record.id,
            carried_token=record.lease_token,
            owner=owner,
            now=now,
            lease_until=now + timedelta(seconds=60),
        )
        uow.commit()
    assert claimed is not None
    return claimed


def test_the_detail_shows_provider_calls_lease_history_events_and_ledger(api: Api) -> None:
    # The confirm's answer is lost after the provider acted: the worker queries first.
    api.provider.fail("confirm", 1, "unknown_after_effect")
    record = accept(api.container, _client(api, api.client_a_id), "detail-1", amount=2500)
    process_payment(api.container.runner(), record.id, record.lease_token, sleep=lambda _s: None)

    detail = _get(api, f"/v1/ops/payments/{record.id}")

    assert detail["payment"]["status"] == "succeeded"
    assert detail["payment"]["client_id"] == api.client_a_id
    calls = detail["provider_calls"]
    assert [(c["operation"], c["outcome"]) for c in calls] == [
        ("create", "ok"),
        ("confirm", "unknown"),
        ("retrieve", "ok"),
    ]
    intent = calls[0]["provider_object_id"]
    assert calls[0]["method"] == "POST" and calls[0]["path"] == "/v1/payment_intents"
    assert calls[0]["idempotency_key"] == f"payorch-{record.id}-create"
    assert calls[1]["idempotency_key"] == f"payorch-{record.id}-confirm-1"
    assert calls[1]["path"] == f"/v1/payment_intents/{intent}/confirm"
    assert calls[1]["error"] and calls[1]["provider_status"] is None
    assert calls[2]["method"] == "GET" and calls[2]["provider_status"] == "succeeded"
    assert all(c["latency_ms"] >= 0 for c in calls)
    assert [e["event"] for e in detail["lease_history"]] == ["claim", "finish"]
    assert [e["type"] for e in detail["events"]] == ["payment.succeeded"]
    assert sum(line["amount"] for line in detail["ledger"]) == 0
    assert len(detail["ledger"]) == 2
    [operation] = detail["operations"]
    assert operation["lease_state"] == "finished"
    assert operation["unknown_outcomes"] == 1


def test_a_takeover_shows_in_the_lease_history_and_the_audit(api: Api) -> None:
    stuck = _claimed(api, "stuck-1")
    expire_leases(api.container, [stuck.id], ago=timedelta(seconds=5))
    with api.client(api.ops_key) as client:
        taken = client.post(
            f"/v1/ops/payments/{stuck.id}/takeover", json={"reason": "host gone", "force": False}
        )
    assert taken.status_code == 200, taken.text

    detail = _get(api, f"/v1/ops/payments/{stuck.id}")

    history = detail["lease_history"]
    assert [(e["event"], e["owner"], e["lease_token"]) for e in history] == [
        ("claim", "worker-9:99", stuck.lease_token),
        ("takeover", "dispatch:operator", stuck.lease_token + 1),
    ]
    [audit] = detail["audit"]
    assert audit["reason"] == "host gone" and audit["action"] == "takeover"
    assert detail["operations"][0]["lease_state"] == "active"  # the fresh dispatch lease


def test_a_fenced_out_finish_leaves_no_history_row(api: Api) -> None:
    holder = _claimed(api, "zombie-1")
    force(api.container, holder.id, recovery_point="provider_settled", provider_outcome="succeeded")
    expire_leases(api.container, [holder.id], ago=timedelta(seconds=5))
    with api.client(api.ops_key) as client:
        client.post(f"/v1/ops/payments/{holder.id}/takeover", json={"reason": "zombie"})
    assert finish_with_token(api.container, reload(api.container, holder.id)) is not None
    stale = finish_with_token(api.container, holder)  # the zombie, with its old token
    assert stale is None

    events = [e["event"] for e in _get(api, f"/v1/ops/payments/{holder.id}")["lease_history"]]
    assert events == ["claim", "takeover", "finish"]  # one finish: the new holder's


@pytest.mark.parametrize(
    "path", ["/v1/ops/payments/pay_" + "0" * 32, "/v1/ops/payments", "/v1/ops/status"]
)
def test_the_read_routes_need_an_ops_key(api: Api, path: str) -> None:
    with api.client(api.key_a) as client:
        forbidden = client.get(path)
    assert forbidden.status_code == 403
    assert forbidden.headers["content-type"] == PROBLEM_JSON
    with api.client("") as client:
        assert client.get(path, headers={"Authorization": ""}).status_code == 401


@pytest.mark.parametrize("payment_id", ["pay_" + "0" * 32, "pay_short", "x" * 40])
def test_an_unknown_or_malformed_payment_is_a_404_problem(api: Api, payment_id: str) -> None:
    with api.client(api.ops_key) as client:
        response = client.get(f"/v1/ops/payments/{payment_id}")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON


def test_the_list_pages_through_every_payment_once_newest_first(api: Api) -> None:
    a, b = _client(api, api.client_a_id), _client(api, api.client_b_id)
    ids = [accept(api.container, a if n % 2 else b, f"page-{n}").id for n in range(7)]

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = _get(api, "/v1/ops/payments", **params)
        pages += 1
        seen += [p["id"] for p in page["data"]]
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        cursor = page["next_cursor"]
    assert pages == 3
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    created = [p["created_at"] for p in _get(api, "/v1/ops/payments", limit=50)["data"]]
    assert created == sorted(created, reverse=True)


def test_the_list_filters_by_status_merchant_reference_key_and_date(api: Api) -> None:
    a, b = _client(api, api.client_a_id), _client(api, api.client_b_id)
    first = accept(api.container, a, "filter-1")
    second = accept(api.container, b, "filter-2")
    third = accept(api.container, a, "filter-3")
    force(api.container, second.id, status="needs_attention", customer_reference="cus-42")

    def ids(**params: Any) -> set[str]:
        return {p["id"] for p in _get(api, "/v1/ops/payments", **params)["data"]}

    assert ids(status="needs_attention") == {second.id}
    assert ids(client_id=api.client_a_id) == {first.id, third.id}
    assert ids(customer_reference="cus-42") == {second.id}
    assert ids(idempotency_key="filter-3") == {third.id}
    middle = reload(api.container, second.id).created_at.isoformat()
    assert ids(created_after=middle) == {second.id, third.id}
    assert ids(created_before=middle) == {first.id}


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "not-a-cursor"},
        {"cursor": "WyJ4IiwxXQ"},  # base64 of ["x",1]
        # base64 of ["0001-01-01T00:00:00+01:00","pay_0…0"]: a position before UTC's year 1
        {
            "cursor": "WyIwMDAxLTAxLTAxVDAwOjAwOjAwKzAxOjAwIiwicGF5XzAwMDAwMDAwMDAwMDAwMDAw"
            "MDAwMDAwMDAwMDAwMDAwMDAwIl0"
        },
        {"created_after": "2026-12-01T09:00:00"},  # no time zone
        {"status": "lost"},
        {"limit": 0},
    ],
)
def test_a_bad_filter_or_cursor_is_a_400_problem(api: Api, params: dict[str, Any]) -> None:
    with api.client(api.ops_key) as client:
        response = client.get("/v1/ops/payments", params=params)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM_JSON


def test_status_counts_payments_and_leases_by_what_they_mean(api: Api) -> None:
    merchant = _client(api, api.client_a_id)
    empty = _get(api, "/v1/ops/status")
    assert empty["healthy"] is True and empty["oldest_processing_age_seconds"] is None

    _claimed(api, "live")  # active
    expired = _claimed(api, "expired")
    expire_leases(api.container, [expired.id], ago=timedelta(seconds=1))
    deferred = accept(api.container, merchant, "deferred")
    due = accept(api.container, merchant, "due")
    with api.container.uow() as uow:
        now = uow.now()
    force(
        api.container,
        deferred.id,
        lease_owner=None,
        locked_until=now + timedelta(minutes=5),
        next_attempt_at=now + timedelta(minutes=5),
    )
    force(
        api.container,
        due.id,
        lease_owner=None,
        locked_until=now - timedelta(seconds=1),
        next_attempt_at=now - timedelta(seconds=1),
    )
    parked = accept(api.container, merchant, "parked")
    force(api.container, parked.id, status="needs_attention", lease_owner=None, locked_until=None)

    status = _get(api, "/v1/ops/status")

    assert status["payments_by_status"] == {
        "processing": 4,
        "requires_action": 0,
        "requires_capture": 0,
        "succeeded": 0,
        "failed": 0,
        "canceled": 0,
        "needs_attention": 1,
    }
    assert status["leases"] == {"active": 1, "expired": 1, "deferred": 1, "retry_due": 1}
    assert status["needs_attention"] == 1
    assert status["healthy"] is False
    assert status["oldest_processing_age_seconds"] >= 0
    assert status["webhook_backlog"] == 0 and status["disabled_webhook_endpoints"] == 0
    assert status["oldest_undelivered_webhook_age_seconds"] is None
