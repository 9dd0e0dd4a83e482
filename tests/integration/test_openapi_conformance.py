"""What the Schemathesis run with every phase found (issue 43), each as a focused test
over real HTTP: a 405's ``Allow`` names every method of the resource; time filters are
times, not any number; the ops view of a connector account matches its schema; an empty
``If-Match`` is a precondition nothing meets, not a malformed header."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.harness.captures import authorized_payment
from tests.integration.hardening_helpers import BODY, Api, assert_problem, running_api
from tests.integration.webhook_helpers import client_of

PAYMENT = "pay_" + "0" * 32
STRIPE_KEY = "sk_test_ConformanceAccount0001"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        # FastAPI makes one route per method: Starlette named the first one's only.
        ("OPTIONS", "/v1/payments", "GET, POST"),
        ("PUT", f"/v1/payments/{PAYMENT}/refunds", "GET, POST"),
        ("PATCH", "/v1/webhook_endpoints/we_1", "GET, POST, DELETE"),
        # The payment-id route took "retry" for a payment id and answered 404.
        ("GET", "/v1/ops/payments/retry", "POST"),
        ("DELETE", f"/v1/ops/payments/{PAYMENT}", "GET"),
    ],
)
def test_a_405_allows_every_method_the_resource_serves(
    api: Api, method: str, path: str, allow: str
) -> None:
    with api.client(api.ops_key) as client:
        response = client.request(method, path)
    assert_problem(response, 405, "method-not-allowed")
    assert response.headers["allow"] == allow


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/v1/ops/payments", "created_before"),
        ("/v1/ops/payments", "created_after"),
        ("/v1/payments", "created[lt]"),
        ("/v1/payments", "created[gte]"),
    ],
)
@pytest.mark.parametrize("value", ["0.5", "1e9", "nan", "yesterday"])
def test_a_time_filter_that_is_not_a_time_is_a_400_naming_it(
    api: Api, path: str, parameter: str, value: str
) -> None:
    key = api.ops_key if path.startswith("/v1/ops/") else api.key_a
    with api.client(key) as client:
        response = client.get(path, params={parameter: value})
    problem = assert_problem(response, 400, "invalid-request")
    assert problem["errors"] == [{"field": f"query.{parameter}", "message": "not a time"}]
    assert parameter in problem["detail"]


def test_whole_unix_seconds_are_a_time_on_the_merchant_list_only(api: Api) -> None:
    with api.client() as client:
        created = client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": "unix-1"})
        assert created.status_code == 202, created.text
        since_1970 = client.get("/v1/payments", params={"created[gte]": "0"})
        before_1970 = client.get("/v1/payments", params={"created[lt]": "1"})
        iso = client.get("/v1/payments", params={"created[gte]": "1970-01-01T00:00:00Z"})
    assert [p["id"] for p in since_1970.json()["data"]] == [created.json()["id"]]
    assert before_1970.status_code == 200 and before_1970.json()["data"] == []
    assert [p["id"] for p in iso.json()["data"]] == [created.json()["id"]]
    with api.client(api.ops_key) as ops:
        refused = ops.get("/v1/ops/payments", params={"created_after": "0"})
    assert_problem(refused, 400, "invalid-request")


def _schema(api: Api, name: str) -> dict[str, Any]:
    with api.client() as client:
        document: dict[str, Any] = client.get("/openapi.json").json()
    return {**document["components"]["schemas"][name], "components": document["components"]}


def test_the_ops_view_of_an_account_matches_its_schema(api: Api) -> None:
    with api.client() as client:
        created = client.post(
            "/v1/connector_accounts",
            json={"provider": "stripe", "name": "main", "credentials": {"api_key": STRIPE_KEY}},
        )
    assert created.status_code == 201, created.text
    account = created.json()["id"]
    with api.client(api.ops_key) as ops:
        listed = ops.get("/v1/ops/connector_accounts").json()
        disabled = ops.post(f"/v1/ops/connector_accounts/{account}/disable", json={"reason": "r"})
    assert disabled.status_code == 200, disabled.text
    jsonschema.validate(listed, _schema(api, "OpsAccountList"))
    jsonschema.validate(disabled.json(), _schema(api, "DisableOut"))
    assert [entry["id"] for entry in listed["data"]] == [account]


def test_an_empty_if_match_is_a_precondition_nothing_meets(api: Api) -> None:
    with api.client() as client:
        created = client.post(
            "/v1/connector_accounts",
            json={"provider": "stripe", "name": "main", "credentials": {"api_key": STRIPE_KEY}},
        )
        path = f"/v1/connector_accounts/{created.json()['id']}"
        renamed = client.post(path, json={"name": "renamed"}, headers={"If-Match": ""})
        deleted = client.delete(path, headers={"If-Match": ""})
        after = client.get(path).json()
    assert_problem(renamed, 412, "precondition-failed")
    assert_problem(deleted, 412, "precondition-failed")
    assert after["name"] == "main" and after["status"] == "enabled"


def test_an_integral_amount_written_with_a_fraction_is_that_integer_on_ops_routes_too(
    api: Api,
) -> None:
    """JSON Schema's ``integer`` admits ``1500.0``; the merchant's capture took it, the ops
    capture refused it (strict int)."""
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1500)
    path = f"/v1/ops/payments/{payment.id}/capture"
    with api.client(api.ops_key) as ops:
        fraction = ops.post(path, json={"amount": 1500.5, "reason": "agreed"})
        captured = ops.post(path, json={"amount": 1500.0, "reason": "agreed"})
        retry_limit = ops.post(
            "/v1/ops/payments/retry",
            json={"status": "needs_attention", "reason": "r", "dry_run": True, "limit": 5.0},
        )
    assert_problem(fraction, 400, "invalid-request")
    assert captured.status_code == 202, captured.text
    assert captured.json()["operation"]["amount"] == 1500
    assert retry_limit.status_code == 200, retry_limit.text
