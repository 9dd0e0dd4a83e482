"""Refunds: ``POST /v1/payments/{id}/refunds``, ``GET /v1/refunds/{id}``,
``GET /v1/payments/{id}/refunds``."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response

from orchestrator.api.body import parse_model
from orchestrator.api.deps import (
    ContainerDep,
    IdempotencyKey,
    MerchantClient,
    OptionalJsonBody,
)
from orchestrator.api.operation_requests import (
    PAYMENT_NOT_FOUND,
    operation_answer,
    operation_errors,
    operation_fingerprint,
)
from orchestrator.api.problems import Problem
from orchestrator.api.refund_schemas import RefundCreate, RefundList, RefundOut
from orchestrator.api.responses import (
    AUTH_ERRORS,
    ETAG,
    LOCATION,
    REPLAYED,
    RETRY_AFTER,
    conditional_response,
    problem,
)
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import OperationRecord, OperationStatus, is_refund_id
from orchestrator.domain.refund_representation import refund_representation
from orchestrator.services.idempotency import IdempotencyKeyReused
from orchestrator.services.refunds import (
    PaymentNotFound,
    PaymentNotRefundable,
    RefundExceedsCaptured,
    accept_refund,
    get_refund,
    list_refunds,
)

router = APIRouter(tags=["refunds"])

_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        # No body at all is a full refund with no reason or metadata.
        "required": False,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RefundCreate"}}},
    }
}
NEEDS_ATTENTION_RETRY_AFTER = 30


def refund_bytes(record: OperationRecord) -> bytes:
    """A finished refund answers with the bytes its finish stored; an unfinished one with
    its current representation."""
    if record.status.is_final and record.final_response is not None:
        return record.final_response
    return encode_representation(refund_representation(record))


def _headers(record: OperationRecord, poll_interval: int) -> dict[str, str]:
    headers = {"Location": f"/v1/refunds/{record.id}"}
    if record.status is OperationStatus.PROCESSING:
        headers["Retry-After"] = str(poll_interval)
    elif record.status is OperationStatus.NEEDS_ATTENTION:
        headers["Retry-After"] = str(NEEDS_ATTENTION_RETRY_AFTER)
    return headers


def over_refund_detail(payment_id: str, refused: RefundExceedsCaptured) -> str:
    """What is true of the payment's money: captured, refunded, held by refunds in flight
    (named only when there are some), and so the most a refund may ask for now."""
    taken = []
    if refused.refunded:
        taken.append(f"{refused.refunded} refunded")
    if refused.pending:
        taken.append(f"{refused.pending} held by refunds in progress")
    so_far = " and ".join(taken) if taken else "nothing refunded yet"
    most = (
        "nothing is left to refund"
        if refused.left <= 0
        else f"at most {refused.left} can be refunded; ask for at most that amount"
    )
    return (
        f"Payment {payment_id} captured {refused.captured} (minor units), {so_far}: "
        f"{most}. Nothing was stored."
    )


def _refund(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": RefundOut, "description": description}
    if headers:
        doc["headers"] = headers
    return doc


@router.post(
    "/v1/payments/{payment_id}/refunds",
    status_code=202,
    summary="Refund a succeeded payment, in full or in part (idempotent)",
    openapi_extra=_REQUEST_BODY,
    response_model=RefundOut,
    responses={
        200: _refund(
            "Replay of a finished refund: byte for byte the body stored when it finished",
            {"Location": LOCATION, "Idempotent-Replayed": REPLAYED},
        ),
        202: _refund(
            "Accepted, or a replay of a refund not finished yet (the first 202's bytes)",
            {"Location": LOCATION, "Retry-After": RETRY_AFTER, "Idempotent-Replayed": REPLAYED},
        ),
        **operation_errors(
            "refund-exceeds-captured: more than is left to refund; payment-not-refundable: "
            "the payment has not succeeded. Nothing was stored."
        ),
    },
)
def create_refund(
    container: ContainerDep,
    client: MerchantClient,
    payment_id: str,
    body: OptionalJsonBody,
    idempotency_key: IdempotencyKey,
) -> Response:
    payload = parse_model(RefundCreate, body)
    fingerprint = operation_fingerprint(payment_id, "refunds", payload)
    try:
        accepted = accept_refund(
            container.uow,
            container.publisher,
            container.settings,
            client,
            payment_id,
            idempotency_key,
            payload.to_domain(),
            fingerprint,
        )
    except PaymentNotFound:
        raise Problem(404, "not-found", PAYMENT_NOT_FOUND) from None
    except PaymentNotRefundable as refused:
        raise Problem(
            409,
            "payment-not-refundable",
            f"Payment {payment_id} is {refused.payment.status.value}; only a succeeded "
            "payment can be refunded. Nothing was stored.",
            payment_status=refused.payment.status.value,
        ) from None
    except RefundExceedsCaptured as refused:
        raise Problem(
            409,
            "refund-exceeds-captured",
            over_refund_detail(payment_id, refused),
            amount_refundable=refused.left,
            amount_captured=refused.captured,
            amount_refunded=refused.refunded,
            amount_refund_pending=refused.pending,
        ) from None
    except IdempotencyKeyReused as reused:
        raise Problem(
            422,
            "idempotency-key-reused",
            "This Idempotency-Key was already used with a different refund request. Use a "
            "new key for a new refund, or resend the original body to get its result.",
            refund_id=reused.record.id,
        ) from None
    record = accepted.record
    finished = record.status.is_final
    return operation_answer(
        refund_bytes(record) if finished else record.accepted_response or refund_bytes(record),
        finished=finished,
        replayed=accepted.replayed,
        headers=_headers(record, container.settings.poll_interval_seconds),
    )


@router.get(
    "/v1/refunds/{refund_id}",
    summary="Read a refund",
    response_model=RefundOut,
    responses={
        200: _refund("The refund", {"Retry-After": RETRY_AFTER, "ETag": ETAG}),
        304: {
            "description": "Not modified: If-None-Match names the current ETag. No body.",
            "headers": {"ETag": ETAG, "Retry-After": RETRY_AFTER},
        },
        404: problem("No such refund for this client"),
        **AUTH_ERRORS,
    },
)
def read_refund(
    container: ContainerDep,
    client: MerchantClient,
    refund_id: str,
    if_none_match: Annotated[
        str | None,
        Header(description="ETag(s) from an earlier answer: 304 while nothing changed."),
    ] = None,
) -> Response:
    record = get_refund(container.uow, client, refund_id) if is_refund_id(refund_id) else None
    if record is None:
        raise Problem(404, "not-found", "No such refund exists for this API client.")
    headers = _headers(record, container.settings.poll_interval_seconds)
    headers.pop("Location")
    return conditional_response(refund_bytes(record), if_none_match=if_none_match, headers=headers)


@router.get(
    "/v1/payments/{payment_id}/refunds",
    summary="List a payment's refunds, oldest first",
    response_model=RefundList,
    responses={404: problem("No such payment for this client"), **AUTH_ERRORS},
)
def read_payment_refunds(
    container: ContainerDep, client: MerchantClient, payment_id: str
) -> JSONResponse:
    records = list_refunds(container.uow, client, payment_id) if is_payment_id(payment_id) else None
    if records is None:
        raise Problem(404, "not-found", PAYMENT_NOT_FOUND)
    return JSONResponse({"data": [json.loads(refund_bytes(r)) for r in records], "has_more": False})
