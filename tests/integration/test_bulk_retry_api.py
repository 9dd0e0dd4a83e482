"""``POST /v1/ops/payments/retry`` over real HTTP on PostgreSQL: the bulk retry's ops API
twin (decision 0088).  A summary of what matched, was retried and was skipped; ``limit``
and ``more`` carry a long run over several requests without retrying anything twice; bad
input is an RFC 9457 problem saying what to fix; the route is in the OpenAPI document."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.model import ApiClient, Role
from orchestrator.domain.states import PaymentStatus
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import reload
from tests.harness.server import ServerThread
from tests.integration.bulk_retry_helpers import (
    LEASE_SECONDS,
    audit_rows,
    parked,
    with_connector_account,
)

PROBLEM_JSON = "application/problem+json"
PATH = "/v1/ops/payments/retry"


@dataclass
class Api:
    container: Container
    url: str
    publisher: RecordingPublisher
    merchant: ApiClient
    merchant_key: str
    ops: ApiClient
    ops_key: str

    def retry(self, body: Any, api_key: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {api_key or self.ops_key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=60, trust_env=False) as c:
            return c.post(PATH, json=body)


@pytest.fixture
def api(make_postgres_database: Callable[[], str]) -> Iterator[Api]:
    publisher = RecordingPublisher()
    container = build_container(
        make_postgres_database(), publisher=publisher, lease_seconds=LEASE_SECONDS
    )
    merchant = create_client(container.uow, "shop", Role.MERCHANT)
    ops = create_client(container.uow, "oncall-alice", Role.OPS)
    try:
        with ServerThread(create_app(container)) as server:
            yield Api(
                container,
                server.url,
                publisher,
                merchant.client,
                merchant.api_key,
                ops.client,
                ops.api_key,
            )
    finally:
        container.close()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["detail"]
    assert "Traceback" not in response.text
    return body


def test_a_limited_request_retries_the_oldest_and_the_next_request_the_rest(api: Api) -> None:
    payments = [parked(api.container, api.merchant, f"api-bulk-{n}") for n in range(3)]
    api.publisher.published.clear()
    body = {"status": "needs_attention", "reason": "provider outage over", "limit": 2}

    first = api.retry(body)
    second = api.retry(body)
    third = api.retry(body)

    assert first.status_code == 200, first.text
    one = first.json()
    assert (one["matched"], one["retried"], one["skipped"], one["more"]) == (2, 2, 0, True)
    assert [i["payment_id"] for i in one["data"]] == [payments[0].id, payments[1].id]
    item = one["data"][0]
    assert item["result"] == "retried" and item["skipped_because"] is None
    assert (item["old_token"], item["new_token"]) == (
        payments[0].lease_token,
        payments[0].lease_token + 1,
    )
    assert item["published"] is True and isinstance(item["audit_id"], int)
    assert item["connector_account"] == PLATFORM_CIRCUIT_KEY
    two = second.json()
    assert (two["matched"], two["retried"], two["more"]) == (1, 1, False)
    assert [i["payment_id"] for i in two["data"]] == [payments[2].id]
    assert third.json()["matched"] == 0
    assert api.publisher.published == [(p.id, p.lease_token + 1) for p in payments]
    for payment in payments:
        assert reload(api.container, payment.id).status is PaymentStatus.PROCESSING
        assert audit_rows(api.container, payment.id) == [
            ("retry", api.ops.id, "provider outage over")
        ]


def test_a_dry_run_with_filters_lists_and_changes_nothing(api: Api) -> None:
    on_platform = parked(api.container, api.merchant, "api-platform")
    merchant, account = with_connector_account(api.container, api.merchant)
    on_account = parked(api.container, merchant, "api-account")
    api.publisher.published.clear()

    response = api.retry(
        {
            "status": "needs_attention",
            "reason": "INC-7",
            "connector_account": account,
            "since": on_platform.updated_at.isoformat(),
            "dry_run": True,
        }
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["dry_run"], body["matched"], body["would_retry"], body["retried"]) == (
        True,
        1,
        1,
        0,
    )
    assert body["connector_account"] == account
    [item] = body["data"]
    assert (item["payment_id"], item["result"]) == (on_account.id, "would_retry")
    assert item["new_token"] is None and item["audit_id"] is None
    assert api.publisher.published == []
    for record in (on_platform, on_account):
        assert reload(api.container, record.id).lease_token == record.lease_token
        assert audit_rows(api.container, record.id) == []


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"status": "needs_attention"}, 400, "reason"),
        ({"status": "needs_attention", "reason": "  "}, 400, "reason"),
        ({"reason": "r"}, 400, "status"),
        ({"status": "processing", "reason": "r"}, 400, "needs_attention"),
        ({"status": "needs_attention", "reason": "r", "since": "2026-12-05T14:00"}, 400, "zone"),
        ({"status": "needs_attention", "reason": "r", "since": "soon"}, 400, "ISO 8601"),
        ({"status": "needs_attention", "reason": "r", "connector_account": "x"}, 400, "ca_"),
        (
            {"status": "needs_attention", "reason": "r", "connector_account": "ca_" + "0" * 24},
            404,
            "No connector account",
        ),
        ({"status": "needs_attention", "reason": "r", "limit": 0}, 400, "limit"),
        ({"status": "needs_attention", "reason": "r", "limit": 5000}, 400, "limit"),
        ({"status": "needs_attention", "reason": "r", "force": True}, 400, "force"),
        (["needs_attention"], 400, "JSON object"),
    ],
)
def test_bad_input_is_a_problem_saying_what_to_fix_and_changes_nothing(
    api: Api, body: Any, status: int, says: str
) -> None:
    payment = parked(api.container, api.merchant, "api-untouched")

    problem = assert_problem(api.retry(body), status)

    assert says in problem["detail"]
    assert reload(api.container, payment.id).lease_token == payment.lease_token
    assert audit_rows(api.container, payment.id) == []


def test_a_merchant_key_may_not_retry_in_bulk(api: Api) -> None:
    payment = parked(api.container, api.merchant, "api-merchant")

    assert_problem(api.retry({"status": "needs_attention", "reason": "r"}, api.merchant_key), 403)
    assert reload(api.container, payment.id).lease_token == payment.lease_token


def test_the_bulk_retry_is_documented_in_openapi(api: Api) -> None:
    # Building the whole document takes seconds on a loaded machine (httpx's default
    # timeout is 5 s): a bound, not a goal.
    with httpx.Client(base_url=api.url, trust_env=False, timeout=60) as client:
        schema = client.get("/openapi.json").json()

    operation = schema["paths"][PATH]["post"]
    assert set(operation["responses"]) >= {"200", "400", "401", "403", "404", "413", "415"}
    for code in ("400", "404", "401", "403"):
        assert PROBLEM_JSON in operation["responses"][code]["content"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]
    assert set(request["required"]) == {"status", "reason"}
    assert set(request["properties"]) == {
        "status",
        "reason",
        "since",
        "connector_account",
        "dry_run",
        "limit",
    }
