"""Rendering payments as HTTP responses, with the headers the contract promises."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from orchestrator.api.problems import PROBLEM_JSON
from orchestrator.api.schemas import PaymentOut, ProblemOut
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.representation import payment_representation
from orchestrator.domain.states import PaymentStatus

# A parked payment waits for an operator, not for a worker: poll it less eagerly.
NEEDS_ATTENTION_RETRY_AFTER = 30


def payment_headers(record: PaymentRecord, *, poll_interval: int) -> dict[str, str]:
    headers = {"Location": f"/v1/payments/{record.id}"}
    if record.status is PaymentStatus.PROCESSING:
        headers["Retry-After"] = str(poll_interval)
    elif record.status is PaymentStatus.NEEDS_ATTENTION:
        headers["Retry-After"] = str(NEEDS_ATTENTION_RETRY_AFTER)
    return headers


def payment_body(record: PaymentRecord) -> dict[str, Any]:
    # A finished payment answers with the response stored by the finishing transaction,
    # so every replay is byte-for-byte the answer of record.
    if record.status.is_final and record.response_body is not None:
        return dict(record.response_body)
    return payment_representation(record)


def accepted_response(record: PaymentRecord, *, replayed: bool, poll_interval: int) -> JSONResponse:
    headers = payment_headers(record, poll_interval=poll_interval)
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    status = 200 if record.status.is_final else 202
    return JSONResponse(payment_body(record), status_code=status, headers=headers)


def problem(description: str) -> dict[str, Any]:
    return {"model": ProblemOut, "description": description, "content": {PROBLEM_JSON: {}}}


def payment(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": PaymentOut, "description": description}
    if headers:
        doc["headers"] = headers
    return doc


LOCATION = {"description": "URL to poll", "schema": {"type": "string"}}
RETRY_AFTER = {
    "description": "Seconds to wait before polling (while processing)",
    "schema": {"type": "string"},
}
REPLAYED = {
    "description": "'true' when answered from an existing record",
    "schema": {"type": "string"},
}

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: problem("Missing, unknown or revoked API key"),
    403: problem("The API key's role may not use this operation"),
    503: problem("The database is unavailable; retry after the Retry-After seconds"),
}
