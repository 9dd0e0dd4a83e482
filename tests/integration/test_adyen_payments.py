"""Payments on an Adyen connector account, end to end in this process on SQLite and
PostgreSQL: the API accepts, the engine runs the published record through the Adyen adapter,
and the Adyen simulator (over real HTTP, every exchange checked against Checkout v71) says
what it authorised.  The property: one authorisation per payment, with our reference and
our derived key, whatever the network did."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.model import Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.server import ServerThread
from tests.integration.adyen_schema import AdyenWatch
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT

BODY = {
    "amount": 4200,
    "currency": "eur",
    "payment_method": "8415718415172200",  # a stored method at Adyen (storedPaymentMethodId)
    # Adyen's shopperReference (the API takes the `cus_` shape for every provider today).
    "customer": "cus_ada",
    "return_url": "https://shop.example/return",
}


@dataclass
class Stack:
    container: Container
    adyen: RunningAdyenSimulator
    publisher: RecordingPublisher
    url: str
    key: str
    account: str = ""

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
            trust_env=False,
        )

    def pay(self, key: str, **extra: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post(
                "/v1/payments",
                json={**BODY, "connector_account": self.account, **extra},
                headers={"Idempotency-Key": key},
            )
        assert response.status_code == 202, response.text
        return dict(response.json())

    def run(self, payment_id: str) -> ProcessResult:
        """Run the payment as a worker would, its backoffs not slept out."""
        [token] = [t for r, t in self.publisher.published if r == payment_id]
        return process_operation(
            self.container.runner(),
            payment_id,
            token,
            owner="test",
            sleep=lambda seconds: None,
            rng=random.Random(3),
        )

    def shown(self, payment_id: str) -> dict[str, Any]:
        with self.client() as client:
            return dict(client.get(f"/v1/payments/{payment_id}").json())

    def authorisations(self, payment_id: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.adyen.admin.payments(reference=payment_id)
            if p["status"] in ("authorised", "captured")
        ]


@pytest.fixture
def stack(database_url: str) -> Iterator[Stack]:
    watch = AdyenWatch()
    # The stalled answer outlasts the adapter's read timeout: a timeout after the effect.
    config = AdyenSimulatorConfig(answer_observer=watch, stall_seconds=2.5)
    with start_in_thread(config) as adyen:
        publisher = RecordingPublisher()
        container = build_container(
            database_url,
            publisher=publisher,
            adyen_api_base=adyen.url,
            provider_timeout_seconds=1.0,
        )
        merchant = create_client(container.uow, "merchant", Role.MERCHANT)
        try:
            with ServerThread(create_app(container)) as server:
                stack = Stack(container, adyen, publisher, server.url, merchant.api_key)
                with stack.client() as client:
                    created = client.post(
                        "/v1/connector_accounts",
                        json={
                            "name": "Adyen EU",
                            "provider": "adyen",
                            "credentials": {
                                "api_key": API_KEY,
                                "merchant_account": MERCHANT,
                                "hmac_key": HMAC_KEY,
                            },
                        },
                    )
                assert created.status_code == 201, created.text
                stack.account = created.json()["id"]
                yield stack
        finally:
            container.close()
    watch.assert_clean()


def test_an_eur_payment_is_authorised_at_adyen_once_with_our_reference_and_key(
    stack: Stack,
) -> None:
    payment = stack.pay("adyen-1")

    assert stack.run(payment["id"]) is ProcessResult.COMPLETED

    shown = stack.shown(payment["id"])
    assert shown["status"] == "succeeded"
    assert shown["connector_account"] == stack.account
    [authorised] = stack.authorisations(payment["id"])
    assert authorised["amount"] == {"currency": "EUR", "value": 4200}
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert [r["idempotency_key"] for r in sent] == [f"payorch-{payment['id']}-confirm-1"]


def test_an_authorisation_whose_answer_is_lost_is_resolved_by_replaying_its_key(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:timeout_after_effect:times=1")
    payment = stack.pay("adyen-2")

    stack.run(payment["id"])

    assert stack.shown(payment["id"])["status"] == "succeeded"
    assert len(stack.authorisations(payment["id"])) == 1
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert {r["idempotency_key"] for r in sent} == {f"payorch-{payment['id']}-confirm-1"}
    assert len(sent) >= 2  # the lost one, then its replay


def test_a_5xx_with_no_effect_is_replayed_under_the_same_key_and_authorises_once(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("payments:error_500_before:times=2:status=502")
    payment = stack.pay("adyen-3")

    stack.run(payment["id"])

    assert stack.shown(payment["id"])["status"] == "succeeded"
    assert len(stack.authorisations(payment["id"])) == 1
    sent = [r for r in stack.adyen.admin.requests() if r["path"].endswith("/payments")]
    assert {r["idempotency_key"] for r in sent} == {f"payorch-{payment['id']}-confirm-1"}
