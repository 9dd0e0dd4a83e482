"""Messages that told people something false or left them guessing (issue 44), over real
HTTP on SQLite and PostgreSQL:

* an ops key on any merchant route is told which route needs a merchant key (it heard
  "Payments are created and read with a merchant key" on webhook, event and refund routes),
  and a merchant key on an ops route likewise;
* every currency refusal says one sentence, whatever was wrong with the input, on the
  merchant API, the ops-facing routing dry run and the routing rules;
* a time filter with no UTC equivalent is a 400 naming its parameter, not a 500; the
  console's day filter "to 9999-12-31" (whose next day has no datetime) lists everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from orchestrator.api.app import create_app
from orchestrator.api.deps import merchant_client, ops_client
from orchestrator.domain.currencies import CURRENCY_RULE
from tests.harness.seeds import accept
from tests.integration.console_helpers import signed_in
from tests.integration.hardening_helpers import BODY, Api, assert_problem, post_payment, running_api


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _routes_needing(api: Api, role_check: object) -> list[tuple[str, str]]:
    """(method, path template) of every route of the app whose dependencies include
    ``role_check``: new routes are covered without being listed here."""
    found = []
    for route in _api_routes(create_app(api.container).routes):
        if role_check in _calls(route.dependant):
            # The documented template: no convertor ({payment_id}, not {payment_id:payment_id}).
            found.extend((method, route.path_format) for method in sorted(route.methods))
    return found


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    # FastAPI keeps an included router whole (no copies of its routes); the routers carry
    # their prefixes themselves, so each route's path is the full template.
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            found.extend(_api_routes(route.original_router.routes))
    return found


def _calls(dependant: Dependant) -> set[object]:
    found: set[object] = set()
    for sub in dependant.dependencies:
        found |= {sub.call} | _calls(sub)
    return found


def _filled(template: str) -> str:
    # Any well-formed value: the role is checked before the path is looked up.  A payment id
    # has its shape: some routes match no other segment (orchestrator.api.path_ids).
    filled = template.replace("{payment_id}", "pay_" + "0" * 32)
    return filled.replace("{", "x").replace("}", "")


def test_an_ops_key_on_any_merchant_route_is_told_that_route_needs_a_merchant_key(
    api: Api,
) -> None:
    routes = _routes_needing(api, merchant_client)
    paths = {path for _method, path in routes}
    # The routes the issue named are among them (the walk is not vacuous).
    assert {"/v1/webhook_endpoints", "/v1/events", "/v1/refunds/{refund_id}"} <= paths, paths
    assert ("POST", "/v1/payments") in routes

    with api.client(api.ops_key) as client:
        for method, path in routes:
            response = client.request(
                method, _filled(path), json={}, headers={"Idempotency-Key": "role-check"}
            )
            problem = assert_problem(response, 403, "forbidden")
            detail = problem["detail"]
            assert f"{method} {path} needs a merchant API key" in detail, (method, path, detail)
            assert "'ops' role" in detail, detail
            if not path.startswith("/v1/payments"):
                assert "Payments" not in detail, (method, path, detail)


def test_a_merchant_key_on_an_ops_route_is_told_that_route_needs_an_ops_key(api: Api) -> None:
    routes = _routes_needing(api, ops_client)
    assert ("GET", "/v1/ops/payments") in routes, routes
    with api.client(api.key_a) as client:
        for method, path in routes:
            problem = assert_problem(
                client.request(method, _filled(path), json={}), 403, "forbidden"
            )
            assert f"{method} {path} needs an API key with the 'ops' role" in problem["detail"]


CURRENCIES = ["usd1", "", 12, "zzz", "u$d", None, "\u212arw", ["usd"]]


@pytest.mark.parametrize("currency", CURRENCIES, ids=repr)
def test_every_refused_currency_says_the_same_sentence_on_the_merchant_api(
    api: Api, currency: object
) -> None:
    with api.client() as client:
        problem = assert_problem(
            post_payment(client, "currency", {**BODY, "currency": currency}),
            400,
            "invalid-request",
        )
    assert problem["errors"] == [{"field": "currency", "message": CURRENCY_RULE}], problem
    assert CURRENCY_RULE in problem["detail"]
    assert api.count() == 0


def test_upper_case_currency_is_accepted_as_the_sentence_says(api: Api) -> None:
    with api.client() as client:
        accepted = post_payment(client, "upper", {**BODY, "currency": "USD"})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["currency"] == "usd"


@pytest.mark.parametrize("currency", ["usd1", 12, "zzz"], ids=repr)
def test_the_routing_dry_run_and_rules_refuse_a_currency_with_the_same_sentence(
    api: Api, currency: Any
) -> None:
    with api.client() as client:
        dry_run = assert_problem(
            client.post("/v1/routing/evaluate", json={**BODY, "currency": currency}),
            400,
            "invalid-request",
        )
        rules = assert_problem(
            client.put(
                "/v1/routing",
                json={
                    "rules": [
                        {"name": "r", "if": {"currency": ["eur", currency]}, "then": ["platform"]}
                    ],
                    "default": ["platform"],
                },
            ),
            400,
            "invalid-request",
        )
    assert dry_run["errors"] == [{"field": "currency", "message": CURRENCY_RULE}], dry_run
    assert rules["errors"] == [{"field": "rules[0].if.currency[1]", "message": CURRENCY_RULE}], (
        rules
    )


@pytest.mark.parametrize(
    "when",
    [
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-05:00",  # after year 9999 in UTC
    ],
)
@pytest.mark.parametrize("name", ["created_after", "created_before"])
def test_an_ops_time_filter_with_no_utc_equivalent_is_a_400_naming_it(
    api: Api, name: str, when: str
) -> None:
    with api.client(api.ops_key) as client:
        problem = assert_problem(
            client.get("/v1/ops/payments", params={name: when}), 400, "invalid-request"
        )
    assert problem["errors"] == [{"field": f"query.{name}", "message": "out of range"}], problem
    assert name in problem["detail"] and "between years 1 and 9999" in problem["detail"]


def test_an_ops_time_filter_at_the_edges_of_utc_is_answered(api: Api) -> None:
    with api.client(api.ops_key) as client:
        response = client.get(
            "/v1/ops/payments",
            params={
                "created_after": "0001-01-01T00:00:00Z",
                "created_before": "9999-12-31T23:59:59Z",
            },
        )
    assert response.status_code == 200, response.text


def test_the_consoles_day_filter_to_the_last_day_there_is_lists_every_payment(
    api: Api,
) -> None:
    with api.container.uow() as uow:
        merchant = uow.clients.get(api.client_a_id)
    assert merchant is not None
    payment_id = accept(api.container, merchant, "last-day").id
    client, _token = signed_in(api)
    with closing(client):
        page = client.get(
            "/ops/payments", params={"created_from": "0001-01-01", "created_to": "9999-12-31"}
        )
    assert page.status_code == 200, page.text
    assert payment_id in page.text
