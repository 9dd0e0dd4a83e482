"""``/v1/webhook_endpoints``: where a merchant's events are delivered (merchant keys)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, MerchantClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, CREATED_AT, RESOURCE_ETAG, problem, with_headers
from orchestrator.api.routes.ops_leases import ETAG_LIST_PATTERN
from orchestrator.api.schemas import FreeText
from orchestrator.domain.preconditions import TagList, parse_tag_list
from orchestrator.domain.webhooks import EndpointStatus
from orchestrator.events.endpoints import (
    EndpointConflict,
    EndpointError,
    EndpointNotFound,
    EndpointPreconditionFailed,
    InvalidEndpoint,
)
from orchestrator.events.event_documents import endpoint_document

router = APIRouter(prefix="/v1/webhook_endpoints", tags=["webhooks"])

EventList = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=50)]],
    Field(
        min_length=1,
        max_length=20,
        description='Event types to deliver, or ["*"] for every type (also types added later).',
        examples=[["payment.succeeded", "payment.failed"]],
    ),
]


Description = Annotated[
    FreeText,
    StringConstraints(max_length=1000),
    Field(description="Yours to read in lists; not sent with events."),
]


class EndpointCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(
        min_length=1,
        max_length=2048,
        description="https URL; it must resolve to public addresses (outside dev).",
        examples=["https://merchant.example/hooks/payorch"],
    )
    events: EventList
    description: Description | None = None


class EndpointUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    events: EventList | None = None
    description: Description | None = None
    status: Literal["enabled", "disabled"] | None = Field(
        default=None, description="'enabled' re-enables an endpoint the relay disabled."
    )


class EndpointOut(BaseModel):
    id: str
    object: Literal["webhook_endpoint"]
    url: str
    events: list[str]
    description: str | None
    status: Literal["enabled", "disabled"]
    disabled_reason: str | None = Field(
        description="Why the endpoint is disabled: it answered 410, it failed for the whole "
        "retry window, or the merchant disabled it."
    )
    created_at: str
    updated_at: str
    secret_rotated_at: str | None
    etag: str = Field(description="Send as If-Match with a change; stale is 412.")
    secret: str | None = Field(
        default=None,
        description="whsec_…: only in the answers of create and rotate_secret, never again.",
    )


class EndpointList(BaseModel):
    data: list[EndpointOut]


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


IfMatch = Annotated[
    str | None,
    Header(
        description="The endpoint's `etag` as you read it, or `*`. Optional; a stale one "
        "refuses the change with 412 and nothing changes.",
        examples=['"3"'],
        json_schema_extra={"pattern": ETAG_LIST_PATTERN},
    ),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem("Invalid body or URL (SSRF rules), unknown event type, malformed If-Match"),
    404: problem("No such endpoint (or another client's)"),
    409: problem(
        "Changed concurrently (read it again), or the client has as many endpoints as it may"
    ),
    412: problem("If-Match does not name the endpoint's current etag; nothing changed"),
    **AUTH_ERRORS,
}


def _precondition(if_match: str | None) -> TagList | None:
    if if_match is None:
        return None
    parsed = parse_tag_list(if_match)
    if parsed is None:
        raise Problem(
            400,
            "invalid-request",
            'If-Match must be "*" or a list of entity tags in double quotes, such as "3".',
        )
    return parsed


def _problem(error: EndpointError) -> Problem:
    if isinstance(error, InvalidEndpoint):
        return Problem(400, "invalid-request", error.message)
    if isinstance(error, EndpointNotFound):
        return Problem(404, "not-found", error.message)
    if isinstance(error, EndpointPreconditionFailed):
        return Problem(412, "precondition-failed", error.message)
    assert isinstance(error, EndpointConflict)
    return Problem(409, "conflict", error.message)


@router.post(
    "",
    status_code=201,
    summary="Register a webhook endpoint (the secret is shown once)",
    openapi_extra=_body_schema(EndpointCreate),
    response_model=EndpointOut,
    responses={
        201: with_headers(
            "Created; `secret` is in this answer only", Location=CREATED_AT, ETag=RESOURCE_ETAG
        ),
        **_ERRORS,
    },
)
def create_endpoint(container: ContainerDep, client: MerchantClient, body: JsonBody) -> Response:
    payload = parse_model(EndpointCreate, body)
    try:
        created = container.endpoint_service().create(
            client.id, url=payload.url, events=payload.events, description=payload.description
        )
    except EndpointError as error:
        raise _problem(error) from None
    return JSONResponse(
        endpoint_document(created.endpoint, secret=created.secret),
        status_code=201,
        headers={
            "Location": f"/v1/webhook_endpoints/{created.endpoint.id}",
            "ETag": created.endpoint.etag,
            "Cache-Control": "no-store",
        },
    )


@router.get(
    "", summary="List your webhook endpoints", response_model=EndpointList, responses=AUTH_ERRORS
)
def list_endpoints(container: ContainerDep, client: MerchantClient) -> Response:
    endpoints = container.endpoint_service().list(client.id)
    return JSONResponse({"data": [endpoint_document(e) for e in endpoints]})


@router.get(
    "/{endpoint_id}",
    summary="Read a webhook endpoint",
    response_model=EndpointOut,
    responses={200: with_headers("The endpoint", ETag=RESOURCE_ETAG), **_ERRORS},
)
def get_endpoint(container: ContainerDep, client: MerchantClient, endpoint_id: str) -> Response:
    try:
        endpoint = container.endpoint_service().get(client.id, endpoint_id)
    except EndpointError as error:
        raise _problem(error) from None
    return JSONResponse(endpoint_document(endpoint), headers={"ETag": endpoint.etag})


@router.post(
    "/{endpoint_id}",
    summary="Change a webhook endpoint (url, events, description, status)",
    openapi_extra=_body_schema(EndpointUpdate),
    response_model=EndpointOut,
    responses={200: with_headers("The endpoint", ETag=RESOURCE_ETAG), **_ERRORS},
)
def update_endpoint(
    container: ContainerDep,
    client: MerchantClient,
    endpoint_id: str,
    body: JsonBody,
    if_match: IfMatch = None,
) -> Response:
    payload = parse_model(EndpointUpdate, body)
    precondition = _precondition(if_match)
    try:
        endpoint = container.endpoint_service().update(
            client.id,
            endpoint_id,
            if_match=precondition,
            url=payload.url,
            events=payload.events,
            description=payload.description,
            status=None if payload.status is None else EndpointStatus(payload.status),
        )
    except EndpointError as error:
        raise _problem(error) from None
    return JSONResponse(endpoint_document(endpoint), headers={"ETag": endpoint.etag})


@router.delete(
    "/{endpoint_id}",
    status_code=204,
    summary="Delete a webhook endpoint (its pending deliveries stop)",
    responses={204: {"description": "Deleted"}, **_ERRORS},
)
def delete_endpoint(
    container: ContainerDep, client: MerchantClient, endpoint_id: str, if_match: IfMatch = None
) -> Response:
    precondition = _precondition(if_match)
    try:
        container.endpoint_service().delete(client.id, endpoint_id, if_match=precondition)
    except EndpointError as error:
        raise _problem(error) from None
    return Response(status_code=204)


@router.post(
    "/{endpoint_id}/rotate_secret",
    summary="Replace the signing secret (the new one is shown once)",
    response_model=EndpointOut,
    responses={200: with_headers("The endpoint", ETag=RESOURCE_ETAG), **_ERRORS},
)
def rotate_secret(
    container: ContainerDep, client: MerchantClient, endpoint_id: str, if_match: IfMatch = None
) -> Response:
    precondition = _precondition(if_match)
    try:
        rotated = container.endpoint_service().rotate_secret(
            client.id, endpoint_id, if_match=precondition
        )
    except EndpointError as error:
        raise _problem(error) from None
    return JSONResponse(
        endpoint_document(rotated.endpoint, secret=rotated.secret),
        headers={"ETag": rotated.endpoint.etag, "Cache-Control": "no-store"},
    )
