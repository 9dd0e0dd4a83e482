"""A stack with data in every status, for the Schemathesis conformance run (issue 43).

``seed_every_status`` drives the real API and worker (through the simulator's cards) to put
payments in every status a merchant or an operator can read, with a capture, a cancel, a
refund, a webhook endpoint, a connector account and a routing configuration beside them.
Only ``needs_attention`` is written directly: reaching it for real takes a provider that
never answers, which a conformance run has no business waiting for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.harness.seeds import force
from tests.harness.stack import Stack

STRIPE_ACCOUNT_KEY = "sk_test_ConformanceAccount0001"
ON_SESSION = {"off_session": False, "return_url": "https://shop.example/back"}


@dataclass
class Seeded:
    """What was made, by status (the conformance test checks every status is present)."""

    payments: dict[str, str] = field(default_factory=dict)
    refund_id: str = ""
    capture_id: str = ""
    cancel_id: str = ""
    endpoint_id: str = ""
    account_id: str = ""


def _wait(read: Callable[[], dict[str, Any]], wanted: set[str], what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        current = read()
        if current["status"] in wanted:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never reached {wanted}: {current}")
        time.sleep(0.2)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 90
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code < 300, response.text
    body: dict[str, Any] = response.json() if response.content else {}
    return body


def seed_every_status(stack: Stack, client: httpx.Client, webhook_url: str) -> Seeded:
    """Payments in every status and one of every other resource, made through ``client``
    (the merchant's key, on the API under test) and a worker that is already running."""
    seeded = Seeded()

    def pay(key: str, **fields: Any) -> str:
        body = {"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa", **fields}
        response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
        payment_id: str = _ok(response)["id"]
        return payment_id

    def settle(payment_id: str, wanted: set[str]) -> str:
        payment = _wait(lambda: stack.payment(payment_id), wanted, payment_id)
        status: str = payment["status"]
        seeded.payments[status] = payment_id
        return payment_id

    succeeded = settle(pay("seed-succeeded"), {"succeeded"})
    settle(pay("seed-failed", payment_method="pm_card_chargeDeclined"), {"failed"})
    settle(
        pay("seed-action", payment_method="pm_card_threeDSecure2Required", **ON_SESSION),
        {"requires_action"},
    )
    # Held on the provider's side: it settles only when the simulator is told to, which
    # this run never does.  Processing from its accept on; seeded once the provider has
    # answered its confirm, so it is the provider's processing, not a queued payment.
    processing = pay("seed-processing", payment_method="pm_card_sim_processingSucceeds")
    _wait_for(
        lambda: any(r["operation"] == "confirm" for r in stack.provider_requests(processing)),
        f"the provider's confirm of {processing}",
    )
    settle(processing, {"processing"})
    held = settle(pay("seed-held", capture_method="manual"), {"requires_capture"})
    captured = settle(pay("seed-captured", capture_method="manual"), {"requires_capture"})
    canceled = settle(pay("seed-canceled", capture_method="manual"), {"requires_capture"})
    parked = pay("seed-parked")
    _wait(lambda: stack.payment(parked), {"succeeded"}, parked)
    force(stack.container, parked, status="needs_attention")
    seeded.payments["needs_attention"] = parked
    seeded.payments["requires_capture"] = held

    capture = client.post(
        f"/v1/payments/{captured}/capture", json={}, headers={"Idempotency-Key": "seed-capture"}
    )
    seeded.capture_id = _ok(capture)["id"]
    _wait(lambda: stack.payment(captured), {"succeeded"}, captured)
    cancel = client.post(
        f"/v1/payments/{canceled}/cancel", json={}, headers={"Idempotency-Key": "seed-cancel"}
    )
    seeded.cancel_id = _ok(cancel)["id"]
    seeded.payments["canceled"] = canceled
    _wait(lambda: stack.payment(canceled), {"canceled"}, canceled)

    refund = client.post(
        f"/v1/payments/{succeeded}/refunds",
        json={"amount": 300},
        headers={"Idempotency-Key": "seed-refund"},
    )
    seeded.refund_id = _ok(refund)["id"]
    stack.wait_refund_final(seeded.refund_id)

    endpoint = client.post(
        "/v1/webhook_endpoints",
        json={"url": webhook_url, "events": ["*"], "description": "conformance"},
    )
    seeded.endpoint_id = _ok(endpoint)["id"]
    account = client.post(
        "/v1/connector_accounts",
        json={"provider": "stripe", "name": "main", "credentials": {"api_key": STRIPE_ACCOUNT_KEY}},
    )
    seeded.account_id = _ok(account)["id"]
    _ok(client.put("/v1/routing", json={"rules": [], "default": [seeded.account_id, "platform"]}))
    return seeded
