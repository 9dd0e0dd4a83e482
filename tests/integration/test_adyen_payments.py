"""Payments on an Adyen connector account, end to end in this process on SQLite and
PostgreSQL: the API accepts, the engine runs the published record through the Adyen adapter,
and the Adyen simulator (over real HTTP, every exchange checked against Checkout v71) says
what it authorised.  The property: one authorisation per payment, with our reference and
our derived key, whatever the network did."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import outbox_events, payment_disputes, provider_events
from orchestrator.domain.model import Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.adyen_hmac import signed_item
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.server import ServerThread
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.replay.adyen_schema import AdyenWatch

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

    def notification_url(self, account: str | None = None) -> str:
        return f"{self.url}/v1/providers/adyen/notifications/{account or self.account}"

    def delivered(self, event_code: str, psp: str, *, count: int = 1) -> list[dict[str, Any]]:
        """The simulator's deliveries of that item that payorch answered 2xx, once there
        are ``count`` of them (the simulator sends asynchronously)."""

        def found() -> list[dict[str, Any]]:
            return [
                d
                for d in self.adyen.admin.notification_deliveries()
                if d["eventCode"] == event_code
                and d["pspReference"] == psp
                and d["outcome"] == "delivered"
            ]

        return wait_until(lambda: len(found()) >= count, found)

    def stored_events(self, payment_id: str) -> list[tuple[str, str]]:
        with self.container.engine.connect() as conn:
            rows = conn.execute(
                sa.select(provider_events.c.id, provider_events.c.type).where(
                    provider_events.c.payment_id == payment_id
                )
            )
            return [(r.id, r.type) for r in rows]

    def authorisations(self, payment_id: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.adyen.admin.payments(reference=payment_id)
            if p["status"] in ("authorised", "captured")
        ]


def wait_until(done: Callable[[], bool], value: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached in {timeout}s: {value()!r}")
        time.sleep(0.05)
    return value()


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
                adyen.admin.configure_notifications(stack.notification_url(), HMAC_KEY)
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


def test_the_authorisation_notification_is_stored_once_for_its_payment_even_when_duplicated(
    stack: Stack,
) -> None:
    stack.adyen.admin.add_fault("webhook:duplicate:times=1")
    payment = stack.pay("adyen-n1")
    stack.run(payment["id"])
    [authorised] = stack.authorisations(payment["id"])

    stack.delivered("AUTHORISATION", authorised["pspReference"], count=2)

    assert stack.stored_events(payment["id"]) == [
        (f"adyen:{authorised['pspReference']}:AUTHORISATION:true:", "payment_intent.succeeded")
    ]


def test_a_chargeback_notification_records_a_dispute_and_tells_the_merchant(
    stack: Stack,
) -> None:
    payment = stack.pay("adyen-n2")
    stack.run(payment["id"])
    [authorised] = stack.authorisations(payment["id"])

    stack.adyen.admin.chargeback(authorised["pspReference"], amount=4200)
    stack.delivered("CHARGEBACK", wait_for_psp(stack, "CHARGEBACK"))

    with stack.container.engine.connect() as conn:
        disputes = conn.execute(
            sa.select(payment_disputes.c.amount, payment_disputes.c.currency).where(
                payment_disputes.c.payment_id == payment["id"]
            )
        ).all()
    assert [tuple(d) for d in disputes] == [(4200, "eur")]
    with stack.container.engine.connect() as conn:
        announced = conn.execute(
            sa.select(outbox_events.c.event_type)
            .where(outbox_events.c.payment_id == payment["id"])
            .order_by(outbox_events.c.id)
        ).scalars()
        assert list(announced) == ["payment.succeeded", "payment.disputed"]


def wait_for_psp(stack: Stack, event_code: str) -> str:
    items = wait_until(
        lambda: any(i["eventCode"] == event_code for i in stack.adyen.admin.notification_items()),
        stack.adyen.admin.notification_items,
    )
    return str(next(i["pspReference"] for i in items if i["eventCode"] == event_code))


def test_a_notification_signed_with_another_key_is_refused_and_nothing_is_stored(
    stack: Stack,
) -> None:
    item = {
        "pspReference": "ZZZZZZZZZZZZZZZZ",
        "merchantAccountCode": MERCHANT,
        "merchantReference": "pay_forged",
        "amount": {"currency": "EUR", "value": 1},
        "eventCode": "AUTHORISATION",
        "success": "true",
        "eventDate": "2026-01-01T00:00:00+00:00",
    }
    forged = {
        "live": "false",
        "notificationItems": [{"NotificationRequestItem": signed_item(item, "ab" * 32)}],
    }

    answer = httpx.post(stack.notification_url(), content=json.dumps(forged), trust_env=False)

    assert answer.status_code == 401
    assert answer.json()["type"].endswith("/invalid-signature")
    with stack.container.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(provider_events)).scalar() == 0


def test_a_notification_url_naming_no_adyen_account_is_404(stack: Stack) -> None:
    answer = httpx.post(
        stack.notification_url("ca_000000000000000000000000"),
        content=b'{"notificationItems": []}',
        trust_env=False,
    )

    assert answer.status_code == 404
    assert "ca_000000000000000000000000" in answer.json()["detail"]
