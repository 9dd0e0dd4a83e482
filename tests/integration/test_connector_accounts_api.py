"""``/v1/connector_accounts`` and ``/v1/ops/connector_accounts`` over real HTTP on SQLite
and PostgreSQL: credentials write-only and encrypted at rest, validation problems naming
the field, If-Match, tenant isolation, the default account, the ops disable audited."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import api_clients, audit_log, connector_accounts
from tests.integration.hardening_helpers import Api, assert_problem, running_api

STRIPE_KEY = "sk_test_51NabcdefghijklmnopqrstuvWXYZ1234"
ADYEN = {
    "api_key": "AQEyhmfxK4_adyen_key_9876",
    "merchant_account": "ShopEU",
    "hmac_key": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
}


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _create(api: Api, key: str | None = None, **body: object) -> dict:
    body.setdefault("provider", "stripe")
    body.setdefault("name", "main")
    body.setdefault("credentials", {"api_key": STRIPE_KEY})
    with api.client(key) as client:
        response = client.post("/v1/connector_accounts", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _default_of(api: Api, client_id: str) -> str | None:
    with api.container.engine.connect() as conn:
        return conn.execute(
            sa.select(api_clients.c.default_connector_account_id).where(
                api_clients.c.id == client_id
            )
        ).scalar_one()


def test_an_account_shows_only_the_last_four_of_its_credentials_and_is_encrypted_at_rest(
    api: Api,
) -> None:
    created = _create(api, name="EU Stripe")
    with api.client() as client:
        read = client.get(f"/v1/connector_accounts/{created['id']}")
        listed = client.get("/v1/connector_accounts")

    assert created["id"].startswith("ca_") and created["object"] == "connector_account"
    assert created["provider"] == "stripe" and created["name"] == "EU Stripe"
    assert created["credentials"] == {"api_key": "…1234"}
    assert created["status"] == "enabled" and created["default"] is True
    assert STRIPE_KEY not in read.text and STRIPE_KEY not in listed.text
    assert read.headers["etag"] == created["etag"] == '"1"'
    assert [a["id"] for a in listed.json()["data"]] == [created["id"]]
    with api.container.engine.connect() as conn:
        stored = conn.execute(sa.select(connector_accounts)).one()._mapping
    assert STRIPE_KEY not in str(dict(stored))
    assert "51Nabcdefghijklmnop" not in stored["credentials_encrypted"]
    assert _default_of(api, api.client_a_id) == created["id"]


def test_adyen_and_connected_stripe_accounts_are_accepted(api: Api) -> None:
    adyen = _create(api, provider="adyen", name="EU", credentials=ADYEN)
    connected = _create(api, name="connected", credentials={"stripe_account": "acct_1Nabcdefgh"})
    assert set(adyen["credentials"]) == {"api_key", "merchant_account", "hmac_key"}
    assert adyen["credentials"]["hmac_key"] == "…A056"
    assert "ShopEU" not in str(adyen)
    assert connected["credentials"] == {"stripe_account": "…efgh"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"provider": "stripe", "credentials": {"api_key": "pk_test_123456789abc"}}, "api_key"),
        (
            {
                "provider": "stripe",
                "credentials": {"api_key": STRIPE_KEY, "stripe_account": "acct_1Nabcdefgh"},
            },
            "credentials",
        ),
        ({"provider": "stripe", "credentials": {"stripe_account": "cus_123"}}, "stripe_account"),
        ({"provider": "adyen", "credentials": {**ADYEN, "hmac_key": "not hex"}}, "hmac_key"),
        (
            {"provider": "adyen", "credentials": {"api_key": "k", "merchant_account": "m"}},
            "hmac_key",
        ),
        ({"provider": "paypal", "credentials": {}}, "provider"),
        ({"provider": "stripe", "credentials": {"api_key": STRIPE_KEY}, "name": ""}, "name"),
    ],
)
def test_bad_credentials_are_refused_naming_the_field_and_nothing_is_written(
    api: Api, body: dict, field: str
) -> None:
    body = {"name": "x", **body}
    with api.client() as client:
        response = client.post("/v1/connector_accounts", json=body)
    problem = assert_problem(response, 400, "invalid-request")
    assert field in problem["detail"]
    assert "51Nabcdefghij" not in response.text
    with api.container.engine.connect() as conn:
        count = conn.execute(sa.select(sa.func.count()).select_from(connector_accounts))
        assert count.scalar_one() == 0
    assert _default_of(api, api.client_a_id) is None


def test_an_update_with_a_stale_if_match_is_refused_and_changes_nothing(api: Api) -> None:
    created = _create(api)
    path = f"/v1/connector_accounts/{created['id']}"
    with api.client() as client:
        renamed = client.post(path, json={"name": "renamed"}, headers={"If-Match": '"1"'})
        stale = client.post(
            path,
            json={"credentials": {"api_key": "sk_test_OtherKey0000009999"}},
            headers={"If-Match": '"1"'},
        )
        rekeyed = client.post(
            path,
            json={"credentials": {"api_key": "sk_test_OtherKey0000009999"}},
            headers={"If-Match": renamed.headers["etag"]},
        )
        read = client.get(path)

    assert renamed.status_code == 200 and renamed.json()["name"] == "renamed"
    assert renamed.headers["etag"] == '"2"'
    assert_problem(stale, 412, "precondition-failed")
    assert rekeyed.status_code == 200 and rekeyed.json()["credentials"] == {"api_key": "…9999"}
    assert read.json()["name"] == "renamed" and read.headers["etag"] == '"3"'


def test_another_merchant_cannot_see_or_change_an_account(api: Api) -> None:
    created = _create(api)
    path = f"/v1/connector_accounts/{created['id']}"
    with api.client(api.key_b) as client:
        read = client.get(path)
        listed = client.get("/v1/connector_accounts")
        changed = client.post(path, json={"name": "mine now"})
        disabled = client.delete(path)

    for response in (read, changed, disabled):
        assert_problem(response, 404, "not-found")
    assert listed.json() == {"data": []}
    with api.client() as client:
        assert client.get(path).json()["status"] == "enabled"


def test_delete_disables_and_the_default_moves_to_the_next_oldest_enabled_account(
    api: Api,
) -> None:
    first = _create(api, name="first")
    second = _create(api, name="second")
    assert _default_of(api, api.client_a_id) == first["id"]
    with api.client() as client:
        disabled = client.delete(f"/v1/connector_accounts/{first['id']}")
        listed = client.get("/v1/connector_accounts").json()["data"]
    assert disabled.status_code == 200
    assert disabled.json()["status"] == "disabled" and disabled.json()["default"] is False
    assert _default_of(api, api.client_a_id) == second["id"]
    assert [(a["name"], a["status"], a["default"]) for a in listed] == [
        ("first", "disabled", False),
        ("second", "enabled", True),
    ]
    with api.client() as client:
        client.delete(f"/v1/connector_accounts/{second['id']}")
    assert _default_of(api, api.client_a_id) is None  # back to the platform's account


def test_ops_list_every_merchants_accounts_and_disable_one_with_a_reason_audited(
    api: Api,
) -> None:
    a = _create(api, name="a's")
    b = _create(api, api.key_b, name="b's")
    with api.client(api.ops_key) as ops:
        everything = ops.get("/v1/ops/connector_accounts").json()["data"]
        only_b = ops.get("/v1/ops/connector_accounts", params={"client_id": api.client_b_id})
        no_reason = ops.post(f"/v1/ops/connector_accounts/{a['id']}/disable", json={"reason": ""})
        done = ops.post(
            f"/v1/ops/connector_accounts/{a['id']}/disable", json={"reason": "key leaked"}
        )
        again = ops.post(
            f"/v1/ops/connector_accounts/{a['id']}/disable", json={"reason": "key leaked"}
        )
    with api.client() as merchant:
        as_merchant = merchant.get("/v1/ops/connector_accounts")

    assert {x["id"] for x in everything} == {a["id"], b["id"]}
    # Each with its circuit (decision 0082): closed, never failed.
    assert {(x["circuit"]["state"], x["circuit"]["failures"]) for x in everything} == {
        ("closed", 0)
    }
    assert STRIPE_KEY not in str(everything)
    assert [x["id"] for x in only_b.json()["data"]] == [b["id"]]
    assert only_b.json()["data"][0]["client_id"] == api.client_b_id
    assert no_reason.status_code == 400
    assert done.status_code == 200, done.text
    assert done.json()["account"]["status"] == "disabled"
    assert done.json()["audit"]["reason"] == "key leaked"
    assert again.json()["audit"] is None
    assert as_merchant.status_code == 403
    assert _default_of(api, api.client_a_id) is None
    with api.container.engine.connect() as conn:
        rows = conn.execute(sa.select(audit_log.c.action, audit_log.c.payment_id)).all()
    assert [tuple(r) for r in rows] == [("disable_connector_account", a["id"])]
