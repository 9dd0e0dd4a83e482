"""Rendering payments as HTTP responses, with the headers the contract promises."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from orchestrator.api.problems import PROBLEM_JSON
from orchestrator.api.schemas import PaymentOut, ProblemOut
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.payment_representation import canonical_payment, payment_representation
from orchestrator.domain.preconditions import not_modified, representation_etag
from orchestrator.domain.states import PaymentStatus

JSON = "application/json"

# A parked payment waits for an operator, not for a worker: poll it less eagerly.
NEEDS_ATTENTION_RETRY_AFTER = 30


def payment_headers(record: PaymentRecord, *, poll_interval: int) -> dict[str, str]:
    headers = {"Location": f"/v1/payments/{record.id}"}
    if record.status is PaymentStatus.PROCESSING:
        headers["Retry-After"] = str(poll_interval)
    elif record.status is PaymentStatus.NEEDS_ATTENTION:
        headers["Retry-After"] = str(NEEDS_ATTENTION_RETRY_AFTER)
    return headers


def payment_document(record: PaymentRecord) -> dict[str, Any]:
    """The payment as it is now, as a dict in the canonical key order (for bodies that embed
    it: GET ?idempotency_key=)."""
    return payment_representation(record)


def current_payment_bytes(record: PaymentRecord) -> bytes:
    """The body of a GET: the payment as it is now.  A finished payment still changes
    (a refund, a dispute: ``latest_event_sequence``), so a GET renders the record, read
    with its latest event sequence; until something changes after the finish, these are
    the very bytes the finishing transaction stored (the same record, the same number)."""
    return encode_representation(payment_representation(record))


def payment_bytes(record: PaymentRecord) -> bytes:
    """The body of a 200 replay: the answer of record.  A finished payment answers with the
    bytes stored by the finishing transaction, byte for byte, whatever happened since."""
    if record.status.is_final:
        if record.final_response is not None:
            return record.final_response
        if record.response_body is not None:
            # Finished before migration 0003: JSONB gave the keys back in its own order.
            return encode_representation(canonical_payment(dict(record.response_body)))
    return encode_representation(payment_representation(record))


def accepted_bytes(record: PaymentRecord) -> bytes:
    """The body of a 202 (first answer or replay): the bytes stored by the accept."""
    if record.accepted_response is not None:
        return record.accepted_response
    # Accepted before migration 0003: nothing stored; the current representation.
    return encode_representation(payment_representation(record))


def json_bytes_response(
    body: bytes, *, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(body, status_code=status_code, headers=headers, media_type=JSON)


def accepted_response(record: PaymentRecord, *, replayed: bool, poll_interval: int) -> Response:
    headers = payment_headers(record, poll_interval=poll_interval)
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    if record.status.charge_finished:
        # Finished, or authorised and waiting for a capture (manual capture): the charge
        # is done, so a replay answers with the payment as it is.
        return json_bytes_response(payment_bytes(record), status_code=200, headers=headers)
    return json_bytes_response(accepted_bytes(record), status_code=202, headers=headers)


def conditional_response(
    body: bytes, *, if_none_match: str | None, headers: dict[str, str]
) -> Response:
    """A GET's answer with a strong ``ETag`` over ``body``; ``304`` without a body when the
    client's ``If-None-Match`` already names it.  Later readable resources (refunds) answer
    through this too."""
    etag = representation_etag(body)
    headers = {**headers, "ETag": etag}
    if not_modified(if_none_match, etag):
        # RFC 9110 §15.4.5: no body, the same ETag; Retry-After still tells a poller when
        # to come back.
        return Response(status_code=304, headers=headers)
    return json_bytes_response(body, headers=headers)


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
ETAG = {
    "description": "Strong entity tag of this representation; it changes with every change "
    "of the payment. Send it back in If-None-Match to get 304 while nothing changed.",
    "schema": {"type": "string"},
}
REPLAYED = {
    "description": "'true' when answered from an existing record",
    "schema": {"type": "string"},
}

RESOURCE_ETAG = {
    "description": "The resource's `etag`: send it as If-Match with a change",
    "schema": {"type": "string"},
}
CREATED_AT = {"description": "URL of the resource created", "schema": {"type": "string"}}
WWW_AUTHENTICATE = {
    "description": "`Bearer`: send the API key as `Authorization: Bearer <key>`",
    "schema": {"type": "string"},
}


def with_headers(description: str, **headers: dict[str, Any]) -> dict[str, Any]:
    """A success answer's entry that names the headers it carries (``Operation_Id`` for
    ``Operation-Id``)."""
    return {
        "description": description,
        "headers": {name.replace("_", "-"): value for name, value in headers.items()},
    }


AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {
        **problem("Missing, unknown or revoked API key"),
        "headers": {"WWW-Authenticate": WWW_AUTHENTICATE},
    },
    403: problem("The API key's role may not use this operation"),
    503: problem("The database is unavailable; retry after the Retry-After seconds"),
}
