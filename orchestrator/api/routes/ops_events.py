"""``/v1/ops/events``: an event's deliveries and redelivery (ops keys; audited)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.ops_leases import AuditOut
from orchestrator.api.schemas import FreeText
from orchestrator.engine.takeover import Actor
from orchestrator.events.event_documents import delivery_document, event_document
from orchestrator.ops.errors import MAX_REASON_LENGTH, InvalidReason
from orchestrator.ops.events import EventNotFound, event_deliveries, redeliver_event
from orchestrator.ops.lease_documents import audit_representation

router = APIRouter(prefix="/v1/ops/events", tags=["ops"])


class RedeliverRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Annotated[
        FreeText,
        StringConstraints(min_length=1, max_length=MAX_REASON_LENGTH),
        Field(description="Why: recorded in the audit trail.", examples=["merchant lost it"]),
    ]


class AttemptOut(BaseModel):
    attempt: int
    relay: str
    outcome: str
    status_code: int | None
    latency_ms: int
    response_body: str | None = Field(description="The first 1 KiB of the answer.")
    error: str | None
    started_at: str
    recorded_at: str


class DeliveryOut(BaseModel):
    id: int
    endpoint_id: str
    endpoint_url: str
    status: str
    attempts: int
    next_attempt_at: str | None
    window_started_at: str
    last_status_code: int | None
    last_error: str | None
    lease_owner: str | None
    locked_until: str | None
    created_at: str
    delivered_at: str | None
    attempt_log: list[AttemptOut]


class EventDeliveriesOut(BaseModel):
    event: dict[str, Any]
    payment_id: str
    deliveries: list[DeliveryOut]


class RedeliverOut(BaseModel):
    event_id: str
    requeued: int = Field(description="Deliveries due now (one per enabled subscribed endpoint).")
    audit: AuditOut


_NOT_FOUND = problem("No such event")


@router.get(
    "/{event_id}/deliveries",
    summary="An event's deliveries with every attempt",
    response_model=EventDeliveriesOut,
    responses={404: _NOT_FOUND, **AUTH_ERRORS},
)
def get_deliveries(container: ContainerDep, _client: OpsClient, event_id: str) -> Response:
    try:
        found = event_deliveries(container.uow, event_id)
    except EventNotFound:
        raise Problem(404, "not-found", "No such event exists.") from None
    return JSONResponse(
        {
            "event": event_document(found.event),
            "payment_id": found.event.payment_id,
            "deliveries": [delivery_document(v) for v in found.deliveries],
        }
    )


@router.post(
    "/{event_id}/redeliver",
    summary="Deliver an event again to every enabled subscribed endpoint (audited)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": RedeliverRequest.model_json_schema()}},
        }
    },
    response_model=RedeliverOut,
    responses={
        400: problem("Missing reason or invalid body"),
        404: _NOT_FOUND,
        **AUTH_ERRORS,
    },
)
def post_redeliver(
    container: ContainerDep, client: OpsClient, event_id: str, body: JsonBody
) -> Response:
    payload = parse_model(RedeliverRequest, body)
    try:
        done = redeliver_event(
            container.uow,
            Actor.operator(client.id, client.name),
            event_id,
            reason=payload.reason,
        )
    except EventNotFound:
        raise Problem(404, "not-found", "No such event exists.") from None
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    return JSONResponse(
        {
            "event_id": done.event.public_id,
            "requeued": done.requeued,
            "audit": audit_representation(done.audit),
        }
    )
