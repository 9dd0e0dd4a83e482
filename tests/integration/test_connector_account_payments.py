"""Payments on connector accounts, end to end in this process on SQLite and PostgreSQL:
the API accepts, the engine runs each published record with ``process_operation``, and the
in-process Stripe simulator's request log says which credentials each call carried (the
API key's last four, the ``Stripe-Account`` header)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devtools.simulator import RunningSimulator, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.model import Role
from orchestrator.engine.kinds import process_operation
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.server import ServerThread

PLATFORM_KEY = "sk_test_platformKey00000000PLAT"
ACCOUNT_KEY = "sk_test_merchantOwnKey000000OWN1"
CONNECTED = "acct_1ConnectedMerchant"
BODY = {"amount": 2500, "currency": "usd", "payment_method": "pm_card_visa"}


@dataclass
class Stack:
    container: Container
    simulator: RunningSimulator
    publisher: RecordingPublisher
    url: str
    key: str
    done: int = 0

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
            trust_env=False,
        )

    def run_published(self) -> None:
        """Run every record published since the last call, as a worker would."""
        while self.done < len(self.publisher.published):
            record_id, token = self.publisher.published[self.done]
            self.done += 1
            process_operation(self.container.runner(), record_id, token, owner="test")

    def calls(self, record_id: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self.simulator.admin.requests()
            if r["record_id"] == record_id or r["path"].endswith("/refunds")
        ]


@pytest.fixture(scope="module")
def simulator() -> Iterator[RunningSimulator]:
    with start_in_thread() as running:
        yield running


@pytest.fixture
def stack(database_url: str, simulator: RunningSimulator) -> Iterator[Stack]:
    simulator.admin.reset()
    publisher = RecordingPublisher()
    container = build_container(
        database_url,
        publisher=publisher,
        stripe_api_base=simulator.url,
        stripe_api_key=PLATFORM_KEY,
    )
    merchant = create_client(container.uow, "merchant", Role.MERCHANT)
    try:
        with ServerThread(create_app(container)) as server:
            yield Stack(container, simulator, publisher, server.url, merchant.api_key)
    finally:
        container.close()


def _pay(stack: Stack, key: str, **extra: Any) -> dict[str, Any]:
    with stack.client() as client:
        response = client.post(
            "/v1/payments", json={**BODY, **extra}, headers={"Idempotency-Key": key}
        )
    assert response.status_code == 202, response.text
    return response.json()


def _account(stack: Stack, **body: Any) -> str:
    with stack.client() as client:
        response = client.post("/v1/connector_accounts", json={"name": "own", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _status(stack: Stack, payment_id: str) -> dict[str, Any]:
    with stack.client() as client:
        return dict(client.get(f"/v1/payments/{payment_id}").json())


def test_a_merchant_without_accounts_pays_on_the_platform_key_as_before(stack: Stack) -> None:
    created = _pay(stack, "platform")
    stack.run_published()

    assert created["connector_account"] is None
    assert _status(stack, created["id"])["status"] == "succeeded"
    calls = stack.calls(created["id"])
    assert calls and {(c["key_last4"], c["stripe_account"]) for c in calls} == {("PLAT", None)}


def test_the_default_account_s_own_key_carries_the_payment_and_its_refund(stack: Stack) -> None:
    account = _account(stack, provider="stripe", credentials={"api_key": ACCOUNT_KEY})
    created = _pay(stack, "own-key")
    stack.run_published()
    with stack.client() as client:
        refund = client.post(
            f"/v1/payments/{created['id']}/refunds",
            json={"amount": 500},
            headers={"Idempotency-Key": "refund-1"},
        )
    assert refund.status_code == 202, refund.text
    stack.run_published()

    assert created["connector_account"] == account
    assert _status(stack, created["id"])["status"] == "succeeded"
    calls = stack.simulator.admin.requests()
    assert {c["operation"] for c in calls} >= {"create", "confirm", "refund"}
    assert {(c["key_last4"], c["stripe_account"]) for c in calls} == {("OWN1", None)}


def test_a_connected_account_is_sent_as_stripe_account_under_the_platform_key(
    stack: Stack,
) -> None:
    account = _account(stack, provider="stripe", credentials={"stripe_account": CONNECTED})
    created = _pay(stack, "connected", connector_account=account)
    stack.run_published()

    assert created["connector_account"] == account
    assert _status(stack, created["id"])["status"] == "succeeded"
    calls = stack.calls(created["id"])
    assert calls and {(c["key_last4"], c["stripe_account"]) for c in calls} == {("PLAT", CONNECTED)}


def test_new_credentials_take_effect_on_the_next_payment(stack: Stack) -> None:
    account = _account(stack, provider="stripe", credentials={"api_key": ACCOUNT_KEY})
    first = _pay(stack, "before")
    stack.run_published()
    with stack.client() as client:
        changed = client.post(
            f"/v1/connector_accounts/{account}",
            json={"credentials": {"api_key": "sk_test_rotatedKey00000000NEW2"}},
        )
    assert changed.status_code == 200
    second = _pay(stack, "after")
    stack.run_published()

    assert {c["key_last4"] for c in stack.calls(first["id"])} == {"OWN1"}
    assert {c["key_last4"] for c in stack.calls(second["id"])} == {"NEW2"}
