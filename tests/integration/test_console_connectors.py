"""The console's connector accounts page over real HTTP (SQLite and PostgreSQL): every
merchant's accounts with their ``…last4`` and no secret, and the disable form (CSRF, a
reason, audited: the same service as the ops API)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import audit_log
from tests.integration.console_helpers import post_form, signed_in
from tests.integration.hardening_helpers import Api, running_api

KEY = "sk_test_51ConsoleSecretKey0000QRST"
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _account(api: Api, key: str, name: str) -> str:
    with api.client(key) as merchant:
        created = merchant.post(
            "/v1/connector_accounts",
            json={"provider": "stripe", "name": name, "credentials": {"api_key": KEY}},
        )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def test_the_page_lists_every_merchants_accounts_without_their_secrets(api: Api) -> None:
    a = _account(api, api.key_a, HOSTILE)
    b = _account(api, api.key_b, "b's")
    client, _token = signed_in(api)
    with closing(client):
        page = client.get("/ops/connectors")

    assert page.status_code == 200
    assert a in page.text and b in page.text
    assert api.client_a_id in page.text and api.client_b_id in page.text
    assert "…QRST" in page.text and KEY not in page.text
    assert HOSTILE not in page.text and "&lt;script&gt;" in page.text
    assert 'href="/ops/connectors"' in page.text


def test_disable_needs_the_csrf_token_and_a_reason_and_is_audited(api: Api) -> None:
    account = _account(api, api.key_a, "main")
    client, token = signed_in(api)
    path = f"/ops/connectors/{account}/disable"
    with closing(client):
        for forged in (None, "", "wrong"):
            assert post_form(client, path, csrf_token=forged, reason="x").status_code == 403
        no_reason = post_form(client, path, csrf_token=token, reason="  ")
        unknown = post_form(
            client, f"/ops/connectors/ca_{'0' * 24}/disable", csrf_token=token, reason="x"
        )
        done = post_form(client, path, csrf_token=token, reason="key leaked")
        page = client.get(done.headers["location"])

    assert no_reason.status_code == 400 and "reason" in no_reason.text.lower()
    assert unknown.status_code == 404
    assert done.status_code == 303
    assert 'id="action-done"' in page.text and "disabled" in page.text
    with api.client() as merchant:
        assert merchant.get(f"/v1/connector_accounts/{account}").json()["status"] == "disabled"
    with api.container.engine.connect() as conn:
        rows = conn.execute(sa.select(audit_log.c.action, audit_log.c.reason)).all()
    assert [tuple(r) for r in rows] == [("disable_connector_account", "key leaked")]


def test_the_payment_page_names_the_payments_connector_account(api: Api) -> None:
    account = _account(api, api.key_a, "main")
    with api.client() as merchant:
        on_account = merchant.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"},
            headers={"Idempotency-Key": "on-account"},
        ).json()
    with api.client(api.key_b) as merchant:
        on_platform = merchant.post(
            "/v1/payments",
            json={"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"},
            headers={"Idempotency-Key": "on-platform"},
        ).json()
    client, _token = signed_in(api)
    with closing(client):
        first = client.get(f"/ops/payments/{on_account['id']}")
        second = client.get(f"/ops/payments/{on_platform['id']}")

    assert f'id="connector-account">{account}<' in first.text
    assert 'id="connector-account">platform<' in second.text
