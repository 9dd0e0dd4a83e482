"""Capture and cancel: ``POST /v1/payments/{id}/capture``, ``POST /v1/payments/{id}/cancel``.

Both run as operations on the engine (``engine.kinds.capture`` / ``cancel``) and answer
with the payment: ``202`` + ``Location: /v1/payments/{id}`` while the operation runs, ``200``
for a replay of a finished one (the payment as its finish left it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel

from orchestrator.api.body import parse_model
from orchestrator.api.capture_schemas import CancelCreate, CaptureCreate
from orchestrator.api.deps import ContainerDep, IdempotencyKey, MerchantClient, OptionalJsonBody
from orchestrator.api.problems import Problem
from orchestrator.api.responses import (
    AUTH_ERRORS,
    LOCATION,
    REPLAYED,
    RETRY_AFTER,
    json_bytes_response,
    payment,
    problem,
)
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import OperationStatus
from orchestrator.services.captures import (
    AcceptedOperation,
    CaptureExceedsCapturable,
    OperationInProgress,
    PaymentNotFound,
    PaymentStatusConflict,
    accept_cancel,
    accept_capture,
)
from orchestrator.services.idempotency import IdempotencyKeyReused

router = APIRouter(tags=["payments"])

NOT_FOUND = "No such payment exists for this API client."


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
            {"Location": LOCATION, "Idempotent-Replayed": REPLAYED},
        ),
        202: payment(
            "Accepted, or a replay of an operation not finished yet (the first 202's bytes); "
            "poll the payment's URL for its state",
            {"Location": LOCATION, "Retry-After": RETRY_AFTER, "Idempotent-Replayed": REPLAYED},
        ),
        400: problem("Idempotency-Key missing or malformed, or the body is invalid"),
        404: problem("No such payment for this client"),
        409: problem(conflict),
        413: problem("Body larger than 64 KiB"),
        415: problem("A body that is not application/json"),
        422: problem("The Idempotency-Key was already used with a different request"),
        **AUTH_ERRORS,
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
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", NOT_FOUND)
    path = f"/v1/payments/{payment_id}/capture"
    fingerprint = request_fingerprint("POST", path, payload.model_dump(mode="json"))
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
    except CaptureExceedsCapturable as refused:
        raise Problem(
            400,
            "capture-exceeds-capturable",
            f"Payment {payment_id} has {refused.capturable} (minor units) to capture; "
            f"{refused.requested} is more. Ask for at most that amount, or send no amount to "
            "capture all of it. Nothing was stored.",
            amount_capturable=refused.capturable,
        ) from None
    except PaymentStatusConflict as refused:
        raise Problem(
            409,
            "payment-not-capturable",
            f"Payment {payment_id} is {refused.shown_status}; only a requires_capture "
            "payment (capture_method manual, authorised) can be captured. Nothing was stored.",
            payment_status=refused.shown_status,
        ) from None
    except (PaymentNotFound, OperationInProgress, IdempotencyKeyReused) as error:
        raise _shared_problem(error, payment_id) from None
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
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", NOT_FOUND)
    path = f"/v1/payments/{payment_id}/cancel"
    fingerprint = request_fingerprint("POST", path, payload.model_dump(mode="json"))
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
    except PaymentStatusConflict as refused:
        raise Problem(
            409,
            "payment-not-cancelable",
            f"Payment {payment_id} is {refused.shown_status}; a payment can be canceled while "
            "requires_capture or requires_action, or while processing before its "
            "confirmation was sent. Once money moved, refund it instead. Nothing was stored.",
            payment_status=refused.shown_status,
        ) from None
    except (PaymentNotFound, OperationInProgress, IdempotencyKeyReused) as error:
        raise _shared_problem(error, payment_id) from None
    return _answer(accepted, payment_id, container.settings.poll_interval_seconds)


def _shared_problem(error: Exception, payment_id: str) -> Problem:
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
    return Problem(404, "not-found", NOT_FOUND)


def _answer(accepted: AcceptedOperation, payment_id: str, poll_interval: int) -> Response:
    record = accepted.record
    headers = {"Location": f"/v1/payments/{payment_id}"}
    if accepted.replayed:
        headers["Idempotent-Replayed"] = "true"
    if record.status.is_final:
        return json_bytes_response(accepted.body, status_code=200, headers=headers)
    if record.status is OperationStatus.PROCESSING:
        headers["Retry-After"] = str(poll_interval)
    return json_bytes_response(accepted.body, status_code=202, headers=headers)
