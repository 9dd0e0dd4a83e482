"""Routed payments end to end in this process on PostgreSQL: a merchant with a Stripe and
an Adyen account routes EUR to Adyen and the rest to Stripe; the API accepts, the engine
runs each published record, and each simulator (over real HTTP) says what it charged.
An Adyen card sent as an object in ``payment_methods`` reaches Adyen as its
``paymentMethod``; the Stripe account never sees the EUR payment, nor Adyen the USD one."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devtools.adyen_simulator import RunningAdyenSimulator
from devtools.adyen_simulator import start_in_thread as start_adyen
from devtools.simulator import RunningSimulator
from devtools.simulator import start_in_thread as start_stripe
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.model import Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.server import ServerThread
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT

pytestmark = pytest.mark.postgres

STRIPE_KEY = "sk_test_merchantOwnKey000000OWN1"
RETURN_URL = "https://shop.example/return"
ADYEN_CARD = {"type": "scheme", "encryptedCardNumber": "test_4111111111111111"}


@dataclass
class Stack:
    container: Container
    stripe: RunningSimulator
    adyen: RunningAdyenSimulator
    publisher: RecordingPublisher
    url: str
    key: str

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def account(self, provider: str, credentials: dict[str, str]) -> str:
        with self.client() as client:
            created = client.post(
                "/v1/connector_accounts",
                json={"provider": provider, "name": provider, "credentials": credentials},
            )
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def pay(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.client() as client:
            response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
        assert response.status_code == 202, response.text
        return dict(response.json())

    def run(self, payment_id: str) -> ProcessResult:
        [token] = [t for r, t in self.publisher.published if r == payment_id]
        return process_operation(
            self.container.runner(),
            payment_id,
            token,
            owner="test",
            sleep=lambda seconds: None,
            rng=random.Random(5),
        )

    def shown(self, payment_id: str) -> dict[str, Any]:
        with self.client() as client:
            return dict(client.get(f"/v1/payments/{payment_id}").json())


@pytest.fixture
def stack(make_postgres_database: Callable[[], str]) -> Iterator[Stack]:
    with start_stripe() as stripe, start_adyen() as adyen:
        publisher = RecordingPublisher()
        container = build_container(
            make_postgres_database(),
            publisher=publisher,
            stripe_api_base=stripe.url,
            adyen_api_base=adyen.url,
        )
        merchant = create_client(container.uow, "merchant", Role.MERCHANT)
        try:
            with ServerThread(create_app(container)) as server:
                yield Stack(container, stripe, adyen, publisher, server.url, merchant.api_key)
        finally:
            container.close()


def test_eur_goes_to_adyen_and_usd_to_stripe_each_charged_once_at_its_own_provider(
    stack: Stack,
) -> None:
    stripe = stack.account("stripe", {"api_key": STRIPE_KEY})
    adyen = stack.account(
        "adyen", {"api_key": API_KEY, "merchant_account": MERCHANT, "hmac_key": HMAC_KEY}
    )
    with stack.client() as client:
        put = client.put(
            "/v1/routing",
            json={
                "rules": [{"name": "eur-to-adyen", "if": {"currency": ["eur"]}, "then": [adyen]}],
                "default": [stripe],
            },
        )
    assert put.status_code == 200, put.text
    # Adyen takes a returnUrl on every authorisation (its adapter refuses one without).
    body = {
        "return_url": RETURN_URL,
        "payment_methods": {stripe: "pm_card_visa", adyen: ADYEN_CARD},
    }
    eur = stack.pay("eur", {"amount": 4200, "currency": "eur", **body})
    usd = stack.pay("usd", {"amount": 2500, "currency": "usd", **body})

    assert stack.run(eur["id"]) is ProcessResult.COMPLETED
    assert stack.run(usd["id"]) is ProcessResult.COMPLETED

    assert (eur["route"], eur["connector_account"]) == ([adyen], adyen)
    assert (usd["route"], usd["connector_account"]) == ([stripe], stripe)
    assert stack.shown(eur["id"])["status"] == "succeeded"
    assert stack.shown(usd["id"])["status"] == "succeeded"
    authorised = stack.adyen.admin.payments(reference=eur["id"])
    assert [p["amount"] for p in authorised] == [{"currency": "EUR", "value": 4200}]
    assert stack.adyen.admin.payments(reference=usd["id"]) == []
    # The card object reached Adyen: a string method would have gone as a stored method id,
    # which the simulator refuses without a shopperReference.
    assert [p["paymentMethod"] for p in authorised] == ["visa"]
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert [r["reference"] for r in sent] == [eur["id"]]
    stripe_calls = stack.stripe.admin.requests()
    assert {c["record_id"] for c in stripe_calls if c["record_id"]} == {usd["id"]}
    assert {c["key_last4"] for c in stripe_calls} == {"OWN1"}
