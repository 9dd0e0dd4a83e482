"""What the routes that start an operation on a payment share (``POST /v1/payments/{id}/
refunds``, ``/capture``, ``/cancel``): the request's fingerprint, the answer's status, and
the errors every one of them documents.  Each route keeps its own body, service call,
refusals and headers."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel

from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, json_bytes_response, problem
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.ids import is_payment_id

PAYMENT_NOT_FOUND = "No such payment exists for this API client."


def operation_fingerprint(payment_id: str, action: str, payload: BaseModel) -> str:
    """The fingerprint of ``POST /v1/payments/{payment_id}/{action}`` with the validated body
    (a replay must match it).  An id that cannot be a payment's is 404 here, unread."""
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", PAYMENT_NOT_FOUND)
    path = f"/v1/payments/{payment_id}/{action}"
    return request_fingerprint("POST", path, payload.model_dump(mode="json"))


def operation_answer(
    body: bytes, *, finished: bool, replayed: bool, headers: dict[str, str]
) -> Response:
    """``202`` while the operation runs (the first answer's bytes on a replay), ``200`` for
    a replay of a finished one; ``Idempotent-Replayed: true`` on every replay."""
    if replayed:
        headers = {**headers, "Idempotent-Replayed": "true"}
    return json_bytes_response(body, status_code=200 if finished else 202, headers=headers)


def operation_errors(conflict: str) -> dict[int | str, dict[str, Any]]:
    """The problems every such route documents; ``conflict`` says what its 409s mean."""
    return {
        400: problem("Idempotency-Key missing or malformed, or the body is invalid"),
        404: problem("No such payment for this client"),
        409: problem(conflict),
        413: problem("Body larger than 64 KiB"),
        415: problem("A body that is not application/json"),
        422: problem("The Idempotency-Key was already used with a different request"),
        **AUTH_ERRORS,
    }
