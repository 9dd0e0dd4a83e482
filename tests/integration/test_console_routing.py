"""The console's routing pages over real HTTP on PostgreSQL: every merchant's rules (the
implicit configuration for one that never sent any), one merchant's recent decisions with
the rule and the skips, escaping, and a sign-in required."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing

import httpx
import pytest

from tests.integration.console_helpers import signed_in
from tests.integration.hardening_helpers import Api, running_api

pytestmark = pytest.mark.postgres

KEY = "sk_test_51ConsoleSecretKey0000QRST"
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def api(make_postgres_database: Callable[[], str]) -> Iterator[Api]:
    with running_api(make_postgres_database()) as running:
        yield running


def _account(api: Api) -> str:
    with api.client() as merchant:
        created = merchant.post(
            "/v1/connector_accounts",
            json={"provider": "stripe", "name": "main", "credentials": {"api_key": KEY}},
        )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def test_the_pages_show_each_merchants_rules_and_recent_decisions(api: Api) -> None:
    first, second = _account(api), _account(api)
    with api.client() as merchant:
        put = merchant.put(
            "/v1/routing",
            json={
                "rules": [{"name": HOSTILE, "if": {"currency": ["eur"]}, "then": [second, first]}],
                "default": [first],
            },
        )
        assert put.status_code == 200, put.text
        merchant.delete(f"/v1/connector_accounts/{second}")
        paid = merchant.post(
            "/v1/payments",
            json={"amount": 2500, "currency": "eur", "payment_method": "pm_card_visa"},
            headers={"Idempotency-Key": "console-1"},
        )
    assert paid.status_code == 202, paid.text
    client, _token = signed_in(api)
    with closing(client):
        overview = client.get("/ops/routing")
        detail = client.get(f"/ops/routing/{api.client_a_id}")
        missing = client.get("/ops/routing/cli_nobody")

    assert overview.status_code == 200 and 'href="/ops/routing"' in overview.text
    assert f'href="/ops/routing/{api.client_a_id}"' in overview.text
    assert "version 1" in overview.text
    # Merchant b never sent rules: its implicit route is the platform's account.
    b_section = overview.text.split(f'id="routing-{api.client_b_id}"')[1]
    assert "implicit" in b_section and "platform" in b_section
    assert HOSTILE not in overview.text and "&lt;script&gt;" in overview.text

    row = detail.text.split(f'id="decision-{paid.json()["id"]}"')[1].split("</tr>")[0]
    assert first in row and "&lt;script&gt;" in row
    assert f"{second}</span> (disabled)" in row
    assert HOSTILE not in detail.text
    assert missing.status_code == 404 and "No such merchant" in missing.text
    with closing(signed_in(api)[0]) as client:
        payment_page = client.get(f"/ops/payments/{paid.json()['id']}")
    route = payment_page.text.split('id="route"')[1].split("</dd>")[0]
    assert first in route and f"{second}</span> (disabled)" in route


def test_the_pages_need_a_sign_in(api: Api) -> None:
    with httpx.Client(base_url=api.url, trust_env=False, follow_redirects=False) as anonymous:
        page = anonymous.get("/ops/routing")
    assert page.status_code in (302, 303, 307) and "/ops/sign-in" in page.headers["location"]
