"""Saved payment methods are the merchant's own (decision 0063), and a payment's pinned
connector account must be the merchant's own and enabled, over real HTTP on SQLite and
PostgreSQL.  A refusal is a 400 before anything is stored: no payment row, nothing
published for a worker, no provider call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator.db.tables import payment_method_owners
from tests.integration.hardening_helpers import Api, assert_problem, running_api

BODY = {"amount": 1999, "currency": "usd"}


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _pay(api: Api, key: str, idempotency_key: str, **fields: Any):
    with api.client(key) as client:
        return client.post(
            "/v1/payments",
            json={**BODY, "payment_method": "pm_card_visa", **fields},
            headers={"Idempotency-Key": idempotency_key},
        )


def _nothing_stored_for_b(api: Api) -> None:
    assert api.count(client_id=api.client_b_id) == 0
    assert api.provider.calls == []


def test_another_merchant_naming_a_customer_gets_400_and_nothing_is_stored(api: Api) -> None:
    first = _pay(api, api.key_a, "a-1", customer="cus_AliceOfA", payment_method="pm_1SavedA")
    published = list(api.publisher.published)
    refused = _pay(api, api.key_b, "b-1", customer="cus_AliceOfA")

    assert first.status_code == 202, first.text
    problem = assert_problem(refused, 400, "foreign-payment-method")
    assert problem["errors"] == [{"field": "customer", "message": "belongs to another merchant"}]
    _nothing_stored_for_b(api)
    assert api.publisher.published == published


@pytest.mark.parametrize("customer", [None, "cus_BobOfB"])
def test_another_merchant_naming_a_saved_method_gets_400_with_or_without_a_customer(
    api: Api, customer: str | None
) -> None:
    first = _pay(api, api.key_a, "a-1", customer="cus_AliceOfA", payment_method="pm_1SavedA")
    extra = {} if customer is None else {"customer": customer}
    refused = _pay(api, api.key_b, "b-1", payment_method="pm_1SavedA", **extra)

    assert first.status_code == 202
    problem = assert_problem(refused, 400, "foreign-payment-method")
    assert problem["errors"][0]["field"] == "payment_method"
    _nothing_stored_for_b(api)
    with api.container.engine.connect() as conn:
        owners = conn.execute(sa.select(payment_method_owners.c.external_id)).scalars().all()
    assert sorted(owners) == ["cus_AliceOfA", "pm_1SavedA"]  # B's customer was not claimed


def test_the_owner_keeps_using_its_own_customer_and_method(api: Api) -> None:
    for n in range(3):
        again = _pay(api, api.key_a, f"a-{n}", customer="cus_AliceOfA", payment_method="pm_1SavedA")
        assert again.status_code == 202, again.text
    alone = _pay(api, api.key_a, "a-alone", payment_method="pm_1SavedA")
    assert alone.status_code == 202


def test_test_tokens_and_one_time_methods_belong_to_nobody(api: Api) -> None:
    for key in (api.key_a, api.key_b):
        assert _pay(api, key, "test-token").status_code == 202
        assert _pay(api, key, "one-time", payment_method="pm_1OneTimeOnly").status_code == 202
    with api.container.engine.connect() as conn:
        assert (
            conn.execute(sa.select(sa.func.count()).select_from(payment_method_owners)).scalar()
            == 0
        )


def test_a_retry_of_an_accepted_payment_replays_even_after_its_account_was_disabled(
    api: Api,
) -> None:
    with api.client() as client:
        account = client.post(
            "/v1/connector_accounts",
            json={
                "provider": "stripe",
                "name": "own",
                "credentials": {"api_key": "sk_test_merchantOwnKey0001"},
            },
        ).json()
    first = _pay(api, api.key_a, "pinned", connector_account=account["id"])
    with api.client() as client:
        client.delete(f"/v1/connector_accounts/{account['id']}")
    retry = _pay(api, api.key_a, "pinned", connector_account=account["id"])
    fresh = _pay(api, api.key_a, "pinned-2", connector_account=account["id"])

    assert first.status_code == 202 and first.json()["connector_account"] == account["id"]
    assert retry.status_code == 202 and retry.json() == first.json()
    problem = assert_problem(fresh, 400, "invalid-request")
    assert problem["errors"][0]["field"] == "connector_account"
    assert "disabled" in problem["detail"]


def test_a_payment_may_pin_only_its_own_enabled_account(api: Api) -> None:
    with api.client() as client:
        a_account = client.post(
            "/v1/connector_accounts",
            json={
                "provider": "stripe",
                "name": "a",
                "credentials": {"api_key": "sk_test_merchantOwnKey0001"},
            },
        ).json()["id"]
    unknown = _pay(api, api.key_b, "b-unknown", connector_account="ca_" + "0" * 24)
    foreign = _pay(api, api.key_b, "b-foreign", connector_account=a_account)
    own_default = _pay(api, api.key_a, "a-default")
    platform = _pay(api, api.key_b, "b-platform")

    for refused in (unknown, foreign):
        problem = assert_problem(refused, 400, "invalid-request")
        assert problem["errors"][0]["field"] == "connector_account"
    _nothing_stored_for_b_but_the_platform_payment(api)
    assert own_default.json()["connector_account"] == a_account
    assert platform.json()["connector_account"] is None


def _nothing_stored_for_b_but_the_platform_payment(api: Api) -> None:
    assert api.count(client_id=api.client_b_id) == 1


def test_with_wake_ups_by_notify_the_event_loop_accept_hands_these_requests_to_the_thread(
    make_postgres_database,
) -> None:
    """PostgreSQL with ``WAKE_UP=notify``: the event loop's one-statement accept inserts
    only for a merchant without a default account and never sees a request needing an
    ownership check; the thread path answers those, with the same rules."""
    with running_api(make_postgres_database(), wake_up="notify") as api:
        plain = _pay(api, api.key_b, "plain")
        owned = _pay(api, api.key_a, "owned", customer="cus_AliceOfA")
        refused = _pay(api, api.key_b, "foreign", customer="cus_AliceOfA")
        with api.client() as client:
            account = client.post(
                "/v1/connector_accounts",
                json={
                    "provider": "stripe",
                    "name": "own",
                    "credentials": {"api_key": "sk_test_merchantOwnKey0001"},
                },
            ).json()["id"]
        defaulted = _pay(api, api.key_a, "defaulted")
        replayed = _pay(api, api.key_a, "defaulted")
        reused = _pay(api, api.key_a, "defaulted", connector_account=account)

    assert plain.status_code == 202 and plain.json()["connector_account"] is None
    assert owned.status_code == 202
    assert_problem(refused, 400, "foreign-payment-method")
    assert defaulted.status_code == 202 and defaulted.json()["connector_account"] == account
    assert replayed.status_code == 202 and replayed.content == defaulted.content
    assert_problem(reused, 422, "idempotency-key-reused")
