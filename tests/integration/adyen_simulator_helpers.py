"""Helpers for the Adyen simulator tests: request bodies in Adyen's shape, and a client."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import httpx

# The Adyen Python library's public test key (fixtures.json, _about.fixture_hmac_key_hex).
HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
API_KEY = "AQE_simulator_test_key"
MERCHANT = "PayorchECOM"
_references = itertools.count(1)


def new_reference() -> str:
    return f"pay_{uuid.uuid4().hex[:12]}_{next(_references)}"


def card(number: str = "4111111111111111", holder: str | None = None) -> dict[str, Any]:
    method: dict[str, Any] = {
        "type": "scheme",
        "encryptedCardNumber": f"test_{number}",
        "encryptedExpiryMonth": "test_03",
        "encryptedExpiryYear": "test_2030",
        "encryptedSecurityCode": "test_737",
    }
    if holder is not None:
        method["holderName"] = holder
    return method


def payment(
    value: int = 1000,
    *,
    reference: str | None = None,
    method: dict[str, Any] | None = None,
    manual: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "merchantAccount": MERCHANT,
        "amount": {"currency": "EUR", "value": value},
        "reference": reference or new_reference(),
        "paymentMethod": method or card(),
        "returnUrl": "https://shop.example/return",
        **extra,
    }
    if manual:
        body["additionalData"] = {"manualCapture": "true"}
    return body


def amount_body(value: int, currency: str = "EUR", **extra: Any) -> dict[str, Any]:
    return {
        "merchantAccount": MERCHANT,
        "amount": {"currency": currency, "value": value},
        "reference": new_reference(),
        **extra,
    }


class Checkout:
    """Plain HTTP calls to the simulator's Checkout API."""

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, trust_env=False, headers={"X-API-Key": API_KEY}
        )

    def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        sent = dict(headers or {})
        if key is not None:
            sent["Idempotency-Key"] = key
        if timeout is not None:
            return self._http.post(path, json=body, headers=sent, timeout=timeout)
        return self._http.post(path, json=body, headers=sent)

    def pay(self, body: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        response = self.post("/payments", body, key=key)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def modify(self, psp: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.post(f"/payments/{psp}/{action}", body)
        assert response.status_code == 201, response.text
        answer = dict(response.json())
        assert answer["status"] == "received"
        assert answer["paymentPspReference"] == psp
        return answer

    def close(self) -> None:
        self._http.close()
