"""3-D Secure at Adyen with real processes: PostgreSQL, RabbitMQ, ``payorch worker`` and
``payorch sweeper``, the API, the Adyen simulator (every exchange checked against Checkout
v71) and, for the platform's Stripe account, the Stripe simulator.

The re-check is an hour away, so only the details request's wake-up can move the payment
within the test's deadline: the merchant's request commits the shopper's result, a worker
forwards it to ``/payments/details`` and the payment settles, authorised once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from devtools.adyen_simulator import AdyenSimulatorConfig, RunningAdyenSimulator, start_in_thread
from tests.harness.stack import Stack, running_stack
from tests.integration.adyen_simulator_helpers import API_KEY, HMAC_KEY, MERCHANT
from tests.replay.adyen_schema import AdyenWatch

THREE_DS_CARD = "4917610000000000"  # a stored 3DS2-enrolled test card at the simulator
ON_SESSION = {"customer": "cus_ada", "return_url": "https://shop.example/return"}


@pytest.fixture
def adyen() -> Iterator[RunningAdyenSimulator]:
    watch = AdyenWatch()
    with start_in_thread(AdyenSimulatorConfig(answer_observer=watch)) as simulator:
        yield simulator
    watch.assert_clean()


@pytest.fixture
def make_stack(make_postgres_database, make_broker_url, processes, adyen):
    @contextmanager
    def build() -> Iterator[tuple[Stack, str]]:
        with running_stack(
            make_postgres_database(),
            make_broker_url(),
            adyen_api_base=adyen.url,
            action_recheck_seconds=3600,
            action_timeout_seconds=7200,
        ) as stack:
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
            stack.start_sweeper(processes)
            stack.start_worker(processes)
            yield stack, created.json()["id"]

    return build


def wait_for(
    stack: Stack, payment_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        payment = stack.payment(payment_id)
        if check(payment):
            return payment
        assert time.monotonic() < deadline, f"condition never held: {payment}"
        time.sleep(0.2)


def test_a_3ds_payment_at_adyen_succeeds_on_the_shoppers_result_with_one_authorisation(
    make_stack, adyen: RunningAdyenSimulator
) -> None:
    with make_stack() as (stack, account):
        accepted = stack.pay(
            "adyen-3ds-process",
            amount=4200,
            currency="eur",
            payment_method=THREE_DS_CARD,
            connector_account=account,
            **ON_SESSION,
        )
        waiting = wait_for(stack, accepted["id"], lambda p: p["status"] == "requires_action")
        action = waiting["next_action"]["adyen_action"]
        result = adyen.admin.three_ds_result(action["authorisationToken"])

        with stack.client() as client:
            answer = client.post(
                f"/v1/payments/{accepted['id']}/details",
                json={"details": {"threeDSResult": result}},
            )

        assert answer.status_code == 202, answer.text
        final = stack.wait_final(accepted["id"])
        assert final["status"] == "succeeded"
        authorised = [
            p
            for p in adyen.admin.payments(reference=accepted["id"])
            if p["status"] in ("authorised", "captured")
        ]
        assert len(authorised) == 1
        keys = [
            r["idempotency_key"]
            for r in adyen.admin.requests()
            if r["path"].endswith("/payments/details")
        ]
        assert keys == [f"payorch-{accepted['id']}-details-1"]


def test_a_stripe_payment_waiting_for_3ds_refuses_a_forwarded_result_with_409(
    make_stack,
) -> None:
    with make_stack() as (stack, _):
        with stack.client() as client:
            created = client.post(
                "/v1/connector_accounts",
                json={
                    "name": "Stripe",
                    "provider": "stripe",
                    "credentials": {"api_key": "sk_test_payorche2estripe"},
                },
            )
        assert created.status_code == 201, created.text
        accepted = stack.pay(
            "stripe-3ds-process",
            connector_account=created.json()["id"],
            payment_method="pm_card_threeDSecure2Required",
            off_session=False,
            return_url="https://shop.example/back",
        )
        wait_for(stack, accepted["id"], lambda p: p["status"] == "requires_action")

        with stack.client() as client:
            answer = client.post(
                f"/v1/payments/{accepted['id']}/details",
                json={"details": {"threeDSResult": "eyJ0cmFuc1N0YXR1cyI6IlkifQ=="}},
            )

        assert answer.status_code == 409, answer.text
        problem = answer.json()
        assert problem["type"].endswith("/action-result-not-accepted")
        assert problem["provider"] == "stripe"
        assert "client_secret" in problem["detail"]
        assert stack.payment(accepted["id"])["status"] == "requires_action"
