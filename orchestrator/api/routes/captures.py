"""Capture and cancel: ``POST /v1/payments/{id}/capture``, ``POST /v1/payments/{id}/cancel``,
``GET /v1/captures/{id}``, ``GET /v1/cancels/{id}``.

Both run as operations on the engine (``engine.kinds.capture`` / ``cancel``) and answer
with the payment: ``202`` + ``Location: /v1/payments/{id}`` while the operation runs, ``200``
for a replay of a finished one (the payment as its finish left it).  ``Operation-Id`` names
the operation, which a GET reads (its status, and why it failed)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import Response
from pydantic import BaseModel

from orchestrator.api.body import parse_model
from orchestrator.api.capture_schemas import CancelCreate, CaptureCreate, OperationOut
from orchestrator.api.deps import ContainerDep, IdempotencyKey, MerchantClient, OptionalJsonBody
from orchestrator.api.operation_requests import (
    PAYMENT_NOT_FOUND,
    operation_answer,
    operation_errors,
    operation_fingerprint,
)
from orchestrator.api.problems import Problem
from orchestrator.api.responses import (
    AUTH_ERRORS,
    ETAG,
    LOCATION,
    REPLAYED,
    RETRY_AFTER,
    conditional_response,
    payment,
    problem,
)
from orchestrator.domain.operation_representation import operation_bytes
from orchestrator.domain.operations import OperationKindName, OperationStatus, kind_of
from orchestrator.services.captures import (
    AcceptedOperation,
    CaptureExceedsCapturable,
    OperationInProgress,
    PaymentNotFound,
    PaymentStatusConflict,
    accept_cancel,
    accept_capture,
    get_operation,
)
from orchestrator.services.idempotency import IdempotencyKeyReused

router = APIRouter(tags=["payments"])

CAPTURE = OperationKindName.CAPTURE
CANCEL = OperationKindName.CANCEL

# What an accept refuses (nothing stored): ``refusal_problem`` answers each.
REFUSALS = (
    CaptureExceedsCapturable,
    PaymentStatusConflict,
    PaymentNotFound,
    OperationInProgress,
    IdempotencyKeyReused,
)
OPERATION_ID = {
    "description": "The capture's or cancel's id (`cap_…`, `cnl_…`): "
    "`GET /v1/captures/{id}` or `/v1/cancels/{id}` reads it",
    "schema": {"type": "string"},
}


def _body(model: type[BaseModel]) -> dict[str, Any]:
    # Validated by hand (``parse_model``: problem documents, not FastAPI's 422), so the
    # document names the schema itself.  No body at all is the default request.
    return {
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def _responses(conflict: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: payment(
            "Replay of a finished operation: the payment as the operation's finish left it",
            {"Location": LOCATION, "Operation-Id": OPERATION_ID, "Idempotent-Replayed": REPLAYED},
        ),
        202: payment(
            "Accepted, or a replay of an operation not finished yet (the first 202's bytes); "
            "poll the payment's URL for its state",
            {
                "Location": LOCATION,
                "Operation-Id": OPERATION_ID,
                "Retry-After": RETRY_AFTER,
                "Idempotent-Replayed": REPLAYED,
            },
        ),
        **operation_errors(conflict),
    }


@router.post(
    "/v1/payments/{payment_id}/capture",
    status_code=202,
    summary="Capture an authorised payment (manual capture), in full or in part (idempotent)",
    openapi_extra=_body(CaptureCreate),
    responses=_responses(
        "payment-not-capturable: the payment is not requires_capture; operation-in-progress: "
        "another capture or cancel of it has not finished. Nothing was stored."
    ),
)
def capture_payment(
    container: ContainerDep,
    client: MerchantClient,
    payment_id: str,
    body: OptionalJsonBody,
    idempotency_key: IdempotencyKey,
) -> Response:
    payload = parse_model(CaptureCreate, body)
    fingerprint = operation_fingerprint(payment_id, "capture", payload)
    try:
        accepted = accept_capture(
            container.uow,
            container.publisher,
            container.settings,
            client,
            payment_id,
            idempotency_key,
            payload.amount,
            fingerprint,
        )
    except REFUSALS as refused:
        raise refusal_problem(refused, payment_id, CAPTURE) from None
    return _answer(accepted, payment_id, container.settings.poll_interval_seconds)


@router.post(
    "/v1/payments/{payment_id}/cancel",
    status_code=202,
    summary="Cancel a payment before money moved: release an authorisation (idempotent)",
    openapi_extra=_body(CancelCreate),
    responses=_responses(
        "payment-not-cancelable: money moved or may be moving (succeeded, failed, canceled, "
        "or processing after a confirm was sent); operation-in-progress: another capture or "
        "cancel of it has not finished. Nothing was stored."
    ),
)
def cancel_payment(
    container: ContainerDep,
    client: MerchantClient,
    payment_id: str,
    body: OptionalJsonBody,
    idempotency_key: IdempotencyKey,
) -> Response:
    payload = parse_model(CancelCreate, body)
    fingerprint = operation_fingerprint(payment_id, "cancel", payload)
    try:
        accepted = accept_cancel(
            container.uow,
            container.publisher,
            container.settings,
            client,
            payment_id,
            idempotency_key,
            payload.reason,
            fingerprint,
        )
    except REFUSALS as refused:
        raise refusal_problem(refused, payment_id, CANCEL) from None
    return _answer(accepted, payment_id, container.settings.poll_interval_seconds)


def refusal_problem(error: Exception, payment_id: str, kind: OperationKindName) -> Problem:
    """The problem document for a refused capture or cancel (nothing was stored); the ops
    API's operator capture and cancel answer the same."""
    if isinstance(error, CaptureExceedsCapturable):
        return Problem(
            400,
            "capture-exceeds-capturable",
            f"Payment {payment_id} has {error.capturable} (minor units) to capture; "
            f"{error.requested} is more. Ask for at most that amount, or send no amount to "
            "capture all of it. Nothing was stored.",
            amount_capturable=error.capturable,
        )
    if isinstance(error, PaymentStatusConflict) and kind is CAPTURE:
        return Problem(
            409,
            "payment-not-capturable",
            f"Payment {payment_id} is {error.shown_status}; only a requires_capture "
            "payment (capture_method manual, authorised) can be captured. Nothing was stored.",
            payment_status=error.shown_status,
        )
    if isinstance(error, PaymentStatusConflict):
        return Problem(
            409,
            "payment-not-cancelable",
            f"Payment {payment_id} is {error.shown_status}; a payment can be canceled while "
            "requires_capture or requires_action, or while processing before its "
            "confirmation was sent. Once money moved, refund it instead. Nothing was stored.",
            payment_status=error.shown_status,
        )
    if isinstance(error, OperationInProgress):
        return Problem(
            409,
            "operation-in-progress",
            f"Another capture or cancel of payment {payment_id} ({error.operation_id}) has not "
            "finished; poll the payment and try again once it has. Nothing was stored.",
            operation_id=error.operation_id,
        )
    if isinstance(error, IdempotencyKeyReused):
        return Problem(
            422,
            "idempotency-key-reused",
            "This Idempotency-Key was already used with a different request. Use a new key "
            "for a new request, or resend the original body to get its result.",
            operation_id=error.record.id,
        )
    return Problem(404, "not-found", PAYMENT_NOT_FOUND)


def _answer(accepted: AcceptedOperation, payment_id: str, poll_interval: int) -> Response:
    record = accepted.record
    headers = {"Location": f"/v1/payments/{payment_id}", "Operation-Id": record.id}
    if record.status is OperationStatus.PROCESSING:
        headers["Retry-After"] = str(poll_interval)
    return operation_answer(
        accepted.body,
        finished=record.status.is_final,
        replayed=accepted.replayed,
        headers=headers,
    )


IfNoneMatch = Annotated[
    str | None, Header(description="ETag(s) from an earlier answer: 304 while nothing changed.")
]


def _read_responses(noun: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": OperationOut,
            "description": f"The {noun}: its status, and why it failed (`failure`)",
            "headers": {"Retry-After": RETRY_AFTER, "ETag": ETAG},
        },
        304: {
            "description": "Not modified: If-None-Match names the current ETag. No body.",
            "headers": {"ETag": ETAG, "Retry-After": RETRY_AFTER},
        },
        404: problem(f"No such {noun} for this client"),
        **AUTH_ERRORS,
    }


@router.get(
    "/v1/captures/{capture_id}",
    summary="Read a capture (its status; why it failed)",
    response_model=OperationOut,
    responses=_read_responses("capture"),
)
def read_capture(
    container: ContainerDep,
    client: MerchantClient,
    capture_id: str,
    if_none_match: IfNoneMatch = None,
) -> Response:
    return _read_operation(container, client, capture_id, CAPTURE, if_none_match)


@router.get(
    "/v1/cancels/{cancel_id}",
    summary="Read a cancel (its status; why it failed)",
    response_model=OperationOut,
    responses=_read_responses("cancel"),
)
def read_cancel(
    container: ContainerDep,
    client: MerchantClient,
    cancel_id: str,
    if_none_match: IfNoneMatch = None,
) -> Response:
    return _read_operation(container, client, cancel_id, CANCEL, if_none_match)


def _read_operation(
    container: ContainerDep,
    client: MerchantClient,
    operation_id: str,
    kind: OperationKindName,
    if_none_match: str | None,
) -> Response:
    record = None
    if kind_of(operation_id) is kind:
        record = get_operation(container.uow, client, operation_id, kind)
    if record is None:
        raise Problem(404, "not-found", f"No such {kind.value} exists for this API client.")
    headers = {}
    if record.status is OperationStatus.PROCESSING:
        headers["Retry-After"] = str(container.settings.poll_interval_seconds)
    return conditional_response(
        operation_bytes(record), if_none_match=if_none_match, headers=headers
    )
