"""``POST /v1/ops/payments/{id}/capture`` and ``/cancel``: an operator captures or cancels a
payment for its merchant (``ops.captures``: the merchant's accept, audited in its
transaction).

The same refusals as the merchant's routes (``routes.captures.refusal_problem``), plus 400
for a missing reason.  The answer is ``202`` with the operation, the payment as the accept
saw it and the audit row; ``Location`` is the operation's merchant URL."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from orchestrator.api.body import parse_model
from orchestrator.api.capture_schemas import CancellationReason
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem, with_headers
from orchestrator.api.routes.captures import (
    CANCEL,
    CAPTURE,
    OPERATION_ID,
    REFUSALS,
    refusal_problem,
)
from orchestrator.api.routes.ops_leases import Reason
from orchestrator.api.schemas import _integral_number
from orchestrator.domain.currencies import MAX_AMOUNT
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operation_representation import operation_representation
from orchestrator.domain.operations import OperationKindName
from orchestrator.engine.takeover import Actor
from orchestrator.ops.captures import OperatorOperation, operator_cancel, operator_capture
from orchestrator.ops.errors import InvalidReason
from orchestrator.ops.lease_documents import audit_representation

router = APIRouter(prefix="/v1/ops", tags=["ops"])


class OperatorCaptureRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason
    # 100.0 is the integer 100, as on the merchant's capture (JSON Schema's integer).
    amount: Annotated[int, Field(gt=0, le=MAX_AMOUNT), BeforeValidator(_integral_number)] | None = (
        Field(default=None, description="Minor units to capture; default: all that is capturable.")
    )


class OperatorCancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason
    cancellation_reason: CancellationReason | None = Field(
        default=None, description="The provider's cancellation reason (Stripe's), if any."
    )


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    # Bodies are parsed by hand (problem documents, not FastAPI's 422): document them.
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def _responses(conflict: str) -> dict[int | str, dict[str, Any]]:
    return {
        202: with_headers(
            "Accepted: the operation, the payment, the audit row",
            Location={"description": "URL of the operation", "schema": {"type": "string"}},
            Operation_Id=OPERATION_ID,
        ),
        400: problem("Not JSON, no reason, or (capture) more than is capturable"),
        404: problem("No such payment"),
        409: problem(conflict),
        **AUTH_ERRORS,
    }


@router.post(
    "/payments/{payment_id}/capture",
    status_code=202,
    summary="Capture a requires_capture payment for its merchant (audited)",
    openapi_extra=_body_schema(OperatorCaptureRequest),
    responses=_responses("payment-not-capturable, operation-in-progress"),
)
def post_operator_capture(
    container: ContainerDep, client: OpsClient, payment_id: str, body: JsonBody
) -> JSONResponse:
    payload = parse_model(OperatorCaptureRequest, body)
    return _operate(
        payment_id,
        CAPTURE,
        lambda: operator_capture(
            container.uow,
            container.publisher,
            container.settings,
            Actor.operator(client.id, client.name),
            payment_id,
            amount=payload.amount,
            reason=payload.reason,
        ),
    )


@router.post(
    "/payments/{payment_id}/cancel",
    status_code=202,
    summary="Cancel a payment for its merchant before money moved (audited)",
    openapi_extra=_body_schema(OperatorCancelRequest),
    responses=_responses("payment-not-cancelable, operation-in-progress"),
)
def post_operator_cancel(
    container: ContainerDep, client: OpsClient, payment_id: str, body: JsonBody
) -> JSONResponse:
    payload = parse_model(OperatorCancelRequest, body)
    return _operate(
        payment_id,
        CANCEL,
        lambda: operator_cancel(
            container.uow,
            container.publisher,
            container.settings,
            Actor.operator(client.id, client.name),
            payment_id,
            cancellation_reason=payload.cancellation_reason,
            reason=payload.reason,
        ),
    )


def _operate(
    payment_id: str, kind: OperationKindName, command: Callable[[], OperatorOperation]
) -> JSONResponse:
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", "No such payment exists.")
    try:
        done = command()
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    except REFUSALS as refused:
        raise refusal_problem(refused, payment_id, kind) from None
    return _accepted(done)


def _accepted(done: OperatorOperation) -> JSONResponse:
    record = done.accepted.record
    noun = "captures" if record.kind is CAPTURE else "cancels"
    return JSONResponse(
        {
            "operation": operation_representation(record),
            "payment": json.loads(done.accepted.body),
            "audit": audit_representation(done.audit),
        },
        status_code=202,
        headers={"Location": f"/v1/{noun}/{record.id}", "Operation-Id": record.id},
    )
