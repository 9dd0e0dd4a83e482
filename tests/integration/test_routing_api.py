"""``/v1/routing`` over real HTTP on SQLite and PostgreSQL: the implicit configuration, PUT with
If-Match (412 when stale), every refusal a 400 naming its field, the dry run, the ops
read; and at accept, the route stored on the payment (a rule's, a pin's, a split's), with
accounts disabled since the PUT or without a method skipped and recorded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from orchestrator.db.tables import api_clients, payments
from tests.integration.hardening_helpers import Api, assert_problem, running_api

STRIPE_KEY = "sk_test_51NabcdefghijklmnopqrstuvWXYZ1234"
ADYEN = {
    "api_key": "AQEyhmfxK4_adyen_key_9876",
    "merchant_account": "ShopEU",
    "hmac_key": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
}
BODY: dict[str, Any] = {"amount": 2500, "currency": "usd", "payment_method": "pm_card_visa"}


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _account(api: Api, key: str | None = None, provider: str = "stripe") -> str:
    credentials = ADYEN if provider == "adyen" else {"api_key": STRIPE_KEY}
    with api.client(key) as client:
        response = client.post(
            "/v1/connector_accounts",
            json={"provider": provider, "name": provider, "credentials": credentials},
        )
    assert response.status_code == 201, response.text
    account: str = response.json()["id"]
    return account


def _put(api: Api, document: Any, **headers: str) -> httpx.Response:
    with api.client() as client:
        return client.put("/v1/routing", json=document, headers=headers)


def _pay(api: Api, key: str, body: dict[str, Any] | None = None) -> httpx.Response:
    with api.client() as client:
        return client.post("/v1/payments", json=body or BODY, headers={"Idempotency-Key": key})


def _stored(api: Api, payment_id: str) -> dict[str, Any]:
    with api.container.engine.connect() as conn:
        row = conn.execute(sa.select(payments).where(payments.c.id == payment_id)).one()
    return dict(row._mapping)


def test_before_any_put_the_implicit_configuration_routes_to_the_default_account(
    api: Api,
) -> None:
    with api.client() as client:
        platform = client.get("/v1/routing")
    account = _account(api)
    with api.client() as client:
        own = client.get("/v1/routing")
    assert platform.json() == {"rules": [], "default": ["platform"]}
    assert platform.headers["etag"] == '"0"'
    assert own.json() == {"rules": [], "default": [account]}


def test_a_put_is_read_back_and_a_stale_if_match_is_412_and_changes_nothing(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    first = {
        "rules": [{"name": "eur-to-adyen", "if": {"currency": ["eur"]}, "then": [adyen, stripe]}],
        "default": [stripe],
    }
    created = _put(api, first, **{"If-Match": '"0"'})
    second = {"rules": [], "default": [adyen, stripe]}
    replaced = _put(api, second, **{"If-Match": '"1"'})
    stale = _put(api, first, **{"If-Match": '"1"'})
    with api.client() as client:
        read = client.get("/v1/routing")

    assert created.status_code == 200 and created.headers["etag"] == '"1"', created.text
    assert created.json() == first
    assert replaced.status_code == 200 and replaced.headers["etag"] == '"2"'
    assert_problem(stale, 412, "precondition-failed")
    assert read.json() == second and read.headers["etag"] == '"2"'
    with api.container.engine.connect() as conn:
        version = conn.execute(
            sa.select(api_clients.c.routing_version).where(api_clients.c.id == api.client_a_id)
        ).scalar_one()
    assert version == 2  # the flag the one-statement accept reads


def test_every_invalid_configuration_is_a_400_naming_the_field(api: Api) -> None:
    own, disabled = _account(api), _account(api)
    others = _account(api, api.key_b)
    with api.client() as client:
        client.delete(f"/v1/connector_accounts/{disabled}")
    unknown = "ca_" + "0" * 24
    refused = _put(
        api,
        {
            "rules": [
                {"name": "a", "then": [unknown]},
                {"name": "b", "then": [others]},
                {"name": "c", "then": [disabled]},
            ],
            "default": [own],
        },
    )
    shape = _put(
        api,
        {
            "rules": [
                {"name": "r", "if": {"country": ["de"]}, "then": [own]},
                {
                    "name": "r",
                    "split": [{"weight": 60, "then": [own]}, {"weight": 30, "then": [own]}],
                },
            ],
            "default": [],
        },
    )

    problem = assert_problem(refused, 400, "invalid-request")
    assert [e["field"] for e in problem["errors"]] == [
        "rules[0].then[0]",
        "rules[1].then[0]",
        "rules[2].then[0]",
    ]
    assert "not one of your connector accounts" in problem["errors"][1]["message"]
    assert "disabled" in problem["errors"][2]["message"]
    fields = [e["field"] for e in assert_problem(shape, 400, "invalid-request")["errors"]]
    assert fields == ["rules[0].if.country", "rules[1].split", "rules[1].name", "default"]
    with api.client() as client:
        assert client.get("/v1/routing").headers["etag"] == '"0"'  # nothing was stored


def test_the_dry_run_names_the_rule_and_a_split_is_the_same_for_the_same_payment_id(
    api: Api,
) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(
        api,
        {
            "rules": [
                {"name": "big", "if": {"amount_gte": 100000}, "then": [stripe]},
                {
                    "name": "ab",
                    "if": {},
                    "split": [
                        {"weight": 50, "then": [stripe, adyen]},
                        {"weight": 50, "then": [adyen, stripe]},
                    ],
                },
            ],
            "default": [stripe],
        },
    )
    payment_id = "pay_" + "7" * 32
    with api.client() as client:
        big = client.post("/v1/routing/evaluate", json={**BODY, "amount": 200000})
        split = [
            client.post("/v1/routing/evaluate", json={**BODY, "payment_id": payment_id}).json()
            for _ in range(3)
        ]
        bad = client.post("/v1/routing/evaluate", json={**BODY, "payment_id": "x"})
    assert big.status_code == 200, big.text
    assert (big.json()["route"], big.json()["rule"], big.json()["skipped"]) == ([stripe], "big", [])
    assert split[0]["rule"] == "ab" and split[0]["payment_id"] == payment_id
    assert split[0]["route"] in ([stripe, adyen], [adyen, stripe])
    assert split[1] == split[0] == split[2]
    assert assert_problem(bad, 400, "invalid-request")["errors"][0]["field"] == "payment_id"


def test_ops_read_any_merchants_configuration_and_merchants_cannot(api: Api) -> None:
    account = _account(api)
    _put(api, {"rules": [], "default": [account, "platform"]})
    with api.client(api.ops_key) as ops:
        read = ops.get(f"/v1/ops/clients/{api.client_a_id}/routing")
        implicit = ops.get(f"/v1/ops/clients/{api.client_b_id}/routing")
        missing = ops.get("/v1/ops/clients/cli_nobody/routing")
    with api.client() as merchant:
        forbidden = merchant.get(f"/v1/ops/clients/{api.client_a_id}/routing")
    assert read.json() == {"rules": [], "default": [account, "platform"]}
    assert read.headers["etag"] == '"1"'
    assert implicit.json() == {"rules": [], "default": ["platform"]}
    assert_problem(missing, 404, "not-found")
    assert_problem(forbidden, 403, "forbidden")


def test_accept_stores_the_rules_route_and_a_replay_answers_the_same_route(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(
        api,
        {
            "rules": [{"name": "eur", "if": {"currency": ["eur"]}, "then": [adyen, stripe]}],
            "default": [stripe],
        },
    )
    eur = _pay(api, "eur-1", {**BODY, "currency": "eur"})
    replay = _pay(api, "eur-1", {**BODY, "currency": "eur"})
    usd = _pay(api, "usd-1")
    assert eur.status_code == 202, eur.text
    assert eur.json()["route"] == [adyen, stripe] and eur.json()["connector_account"] == adyen
    assert replay.content == eur.content
    assert usd.json()["route"] == [stripe] and usd.json()["connector_account"] == stripe
    stored = _stored(api, eur.json()["id"])
    assert (stored["route"], stored["route_rule"], stored["route_skipped"]) == (
        [adyen, stripe],
        "eur",
        None,
    )
    assert _stored(api, usd.json()["id"])["route_rule"] is None
    with api.client(api.ops_key) as ops:
        seen = ops.get(f"/v1/ops/payments/{eur.json()['id']}").json()
    assert seen["payment"]["route"] == [adyen, stripe]
    assert seen["payment"]["route_rule"] == "eur"


def test_a_pinned_account_is_the_whole_route(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(api, {"rules": [], "default": [stripe, adyen]})
    pinned = _pay(api, "pin-1", {**BODY, "connector_account": adyen})
    assert pinned.json()["route"] == [adyen] and pinned.json()["connector_account"] == adyen
    assert _stored(api, pinned.json()["id"])["route_rule"] is None


def test_an_account_disabled_since_the_put_is_skipped_and_the_skip_recorded(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(api, {"rules": [], "default": [adyen, stripe]})
    with api.client() as client:
        client.delete(f"/v1/connector_accounts/{adyen}")
    accepted = _pay(api, "after-disable")
    assert accepted.json()["route"] == [stripe] and accepted.json()["connector_account"] == stripe
    assert _stored(api, accepted.json()["id"])["route_skipped"] == [
        {"connector_account": adyen, "reason": "disabled"}
    ]
    with api.client() as client:
        client.delete(f"/v1/connector_accounts/{stripe}")
    nothing_left = _pay(api, "all-disabled")
    problem = assert_problem(nothing_left, 400, "invalid-request")
    assert problem["errors"][0]["field"] == "connector_account"
    assert f"{adyen} (disabled)" in problem["detail"]


def test_an_account_without_a_method_for_the_payment_is_skipped(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(api, {"rules": [], "default": [adyen, stripe]})
    card = {"type": "scheme", "encryptedCardNumber": "test_4111111111111111"}
    only_stripe = {k: v for k, v in BODY.items() if k != "payment_method"}
    skipped = _pay(api, "m-1", {**only_stripe, "payment_methods": {stripe: "pm_card_visa"}})
    both = _pay(
        api, "m-2", {**only_stripe, "payment_methods": {stripe: "pm_card_visa", adyen: card}}
    )
    foreign = _pay(
        api, "m-3", {**only_stripe, "payment_methods": {_account(api, api.key_b): "pm_card_visa"}}
    )
    neither = _pay(api, "m-4", only_stripe)

    assert skipped.status_code == 202, skipped.text
    assert skipped.json()["route"] == [stripe] and skipped.json()["payment_method"] is None
    assert _stored(api, skipped.json()["id"])["route_skipped"] == [
        {"connector_account": adyen, "reason": "no_payment_method"}
    ]
    assert both.json()["route"] == [adyen, stripe]
    assert _stored(api, both.json()["id"])["payment_methods"][adyen] == card
    foreign_field = assert_problem(foreign, 400, "invalid-request")["errors"][0]["field"]
    assert foreign_field.startswith("payment_methods.ca_")
    assert assert_problem(neither, 400, "invalid-request")["errors"][0]["field"] == "payment_method"


def test_reusing_a_key_with_other_payment_methods_is_refused(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(api, {"rules": [], "default": [stripe]})
    first = _pay(api, "k-1", {**BODY, "payment_methods": {stripe: "pm_card_visa"}})
    other = _pay(api, "k-1", {**BODY, "payment_methods": {adyen: {"type": "scheme"}}})
    assert first.status_code == 202, first.text
    assert_problem(other, 422, "idempotency-key-reused")


def test_a_merchant_without_routing_keeps_the_one_statement_accept_and_its_route_is_platform(
    api: Api,
) -> None:
    accepted = _pay(api, "plain-1")
    assert accepted.json()["route"] == ["platform"]
    assert accepted.json()["connector_account"] is None
    # PostgreSQL's one-statement claim stores no route (it never reads routing), shown as
    # platform; SQLite's thread path resolves and stores it.
    stored = _stored(api, accepted.json()["id"])["route"]
    assert stored == (None if api.container.database.is_postgres else ["platform"])


def test_a_split_at_accept_gives_the_route_the_dry_run_gives_for_that_payment_id(
    api: Api,
) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    split = [{"weight": 50, "then": [stripe, adyen]}, {"weight": 50, "then": [adyen, stripe]}]
    _put(api, {"rules": [{"name": "ab", "split": split}], "default": [stripe]})
    accepted = [_pay(api, f"split-{n}").json() for n in range(8)]
    with api.client() as client:
        dry_runs = [
            client.post("/v1/routing/evaluate", json={**BODY, "payment_id": p["id"]}).json()
            for p in accepted
        ]
    assert [p["route"] for p in accepted] == [d["route"] for d in dry_runs]
    assert {d["rule"] for d in dry_runs} == {"ab"}
    assert all(p["connector_account"] == p["route"][0] for p in accepted)


def test_a_later_put_never_changes_the_route_of_an_accepted_payment(api: Api) -> None:
    stripe, adyen = _account(api), _account(api, provider="adyen")
    _put(api, {"rules": [], "default": [stripe]})
    accepted = _pay(api, "before-change").json()
    _put(api, {"rules": [], "default": [adyen]})
    replay = _pay(api, "before-change").json()
    with api.client() as client:
        read = client.get(f"/v1/payments/{accepted['id']}").json()
    assert accepted["route"] == replay["route"] == read["route"] == [stripe]
    assert read["connector_account"] == stripe
    assert _pay(api, "after-change").json()["route"] == [adyen]
