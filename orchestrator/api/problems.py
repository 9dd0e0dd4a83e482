"""RFC 9457 problem documents.  Every error the API returns is one of these, with a
``type`` URI per kind of problem and a ``detail`` that says what to fix; no stack trace
ever reaches a client."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://payorch.dev/problems/"

TITLES: dict[str, str] = {
    "invalid-request": "The request is invalid",
    "invalid-idempotency-key": "The Idempotency-Key is missing or malformed",
    "idempotency-key-reused": "This Idempotency-Key was used for a different request",
    "payload-too-large": "The request body is too large",
    "request-header-too-large": "The request headers are too large",
    "unsupported-media-type": "The request body must be JSON",
    "unauthorized": "A valid API key is required",
    "invalid-signature": "The notification's signature is missing or wrong",
    "forbidden": "This API key may not use this operation",
    "csrf-failed": "The form's CSRF token is missing or wrong",
    "not-found": "Not found",
    "conflict": "The operation conflicts with the resource's state",
    "precondition-failed": "The resource changed since the If-Match tag was read",
    "refund-exceeds-captured": "The refund is more than what is left to refund",
    "payment-not-refundable": "Only a succeeded payment can be refunded",
    "payment-not-capturable": "Only a requires_capture payment can be captured",
    "payment-not-cancelable": "The payment can no longer be canceled",
    "capture-exceeds-capturable": "The capture is more than the authorisation holds",
    "operation-in-progress": "Another capture or cancel of this payment is not finished",
    "payment-not-awaiting-action": "Only a requires_action payment takes an authentication result",
    "action-result-not-accepted": "The payment's provider takes no forwarded authentication result",
    "action-result-in-progress": "Another authentication result of this payment is being forwarded",
    "foreign-payment-method": "The customer or payment method belongs to another merchant",
    "method-not-allowed": "Method not allowed",
    "service-unavailable": "The service is temporarily unavailable",
    "internal-error": "Internal error",
}


class Problem(Exception):
    """Raise from routes and dependencies; rendered by the app's handler."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        assert slug in TITLES, slug
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions


def problem_body(
    status: int, slug: str, detail: str, instance: str | None = None, **extensions: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + slug,
        "title": TITLES[slug],
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    body.update(extensions)
    return body


def problem_response(problem: Problem, instance: str | None = None) -> JSONResponse:
    return JSONResponse(
        problem_body(problem.status, problem.slug, problem.detail, instance, **problem.extensions),
        status_code=problem.status,
        headers=problem.headers,
        media_type=PROBLEM_JSON,
    )
