"""Adyen's error answers (``ServiceError``: ``status``, ``errorCode``, ``message``,
``errorType``, optionally ``pspReference``).

Bodies and codes are Adyen's where Adyen publishes them (the Checkout v71 examples, the
Python library's mocks, the idempotency page); the others are marked **(ours)**.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AdyenError(Exception):
    status: int
    error_code: str
    message: str
    error_type: str
    headers: dict[str, str] = field(default_factory=dict)
    psp_reference: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": self.status,
            "errorCode": self.error_code,
            "message": self.message,
            "errorType": self.error_type,
        }
        if self.psp_reference is not None:
            body["pspReference"] = self.psp_reference
        return body


def unauthorized() -> AdyenError:
    return AdyenError(401, "000", "HTTP Status Response - Unauthorized", "security")


def invalid_merchant_account(psp_reference: str) -> AdyenError:
    return AdyenError(
        403, "901", "Invalid Merchant Account", "security", psp_reference=psp_reference
    )


def malformed_json(detail: str) -> AdyenError:
    return AdyenError(400, "702", f"Unexpected input: {detail}", "validation")


def required_field(name: str) -> AdyenError:
    # (ours) the 702 family is Adyen's "invalid input" code; the wording is ours.
    return AdyenError(400, "702", f"Required field '{name}' is not provided.", "validation")


def invalid_field(name: str, detail: str) -> AdyenError:
    # (ours)
    return AdyenError(422, "702", f"Invalid field '{name}': {detail}", "validation")


def reference_missing() -> AdyenError:
    return AdyenError(422, "130", "Reference Missing", "validation")


def amount_missing() -> AdyenError:
    return AdyenError(422, "100", "There is no amount specified", "validation")


def invalid_card_number() -> AdyenError:
    return AdyenError(422, "101", "Invalid card number", "validation")


def unknown_payment(psp_reference: str) -> AdyenError:
    # (ours) Adyen's wording for a modification of a pspReference it does not know.
    return AdyenError(
        422, "167", f"Original pspReference required: {psp_reference} not found", "validation"
    )


def payment_data_unknown() -> AdyenError:
    # (ours)
    return AdyenError(422, "14_002", "Invalid payload provided", "validation")


def idempotency_key_too_long() -> AdyenError:
    # (ours) Adyen documents the 64-character limit, not the error it answers.
    return AdyenError(400, "702", "Idempotency-Key must be at most 64 characters", "validation")


def idempotency_in_progress(status: int = 422) -> AdyenError:
    """A replay while the first request with the key still runs (Adyen: 422 or 409, 704)."""
    return AdyenError(
        status,
        "704",
        "request already processed or in progress",
        "validation",
        headers={"transient-error": "true"},
    )


def idempotency_store_unavailable() -> AdyenError:
    """Adyen's idempotency store is down (503, 703): retry later with the same key."""
    return AdyenError(
        503,
        "703",
        "required resource temporarily unavailable",
        "internal",
        headers={"transient-error": "true"},
    )


def internal(status: int = 500) -> AdyenError:
    # (ours) a 5xx injected by a fault; Adyen's 5xx bodies vary (a gateway may send none).
    return AdyenError(status, "000", "Internal error", "internal")


def rate_limited(retry_after: int) -> AdyenError:
    return AdyenError(
        429, "000", "Too many requests", "throttling", headers={"Retry-After": str(retry_after)}
    )


def not_found(method: str, path: str) -> AdyenError:
    return AdyenError(404, "000", f"Not found: {method} {path}", "validation")
