"""``GET /v1/events``: a merchant lists (and recovers) the events it missed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from orchestrator.api.deps import ContainerDep, MerchantClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.events.event_documents import event_document
from orchestrator.events.event_reads import (
    DEFAULT_EVENT_LIMIT,
    MAX_EVENT_LIMIT,
    InvalidEventQuery,
    get_event,
    list_events,
)

router = APIRouter(prefix="/v1/events", tags=["webhooks"])


class EventData(BaseModel):
    object: dict[str, Any] = Field(description="The resource as it was at the event.")


class EventOut(BaseModel):
    id: str = Field(description="evt_…: also the webhook-id header of its deliveries.")
    type: str
    created_at: str
    sequence: int = Field(description="Increases per payment: discard an older one.")
    data: EventData


class EventList(BaseModel):
    data: list[EventOut]
    has_more: bool


@router.get(
    "",
    summary="List your events, oldest first",
    response_model=EventList,
    responses={400: problem("Unknown type, unknown 'after' id, limit out of range"), **AUTH_ERRORS},
)
def get_events(
    container: ContainerDep,
    client: MerchantClient,
    type: Annotated[str | None, Query(max_length=50, description="Only this type.")] = None,
    after: Annotated[
        str | None, Query(max_length=100, description="An event id: events after it.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENT_LIMIT)] = DEFAULT_EVENT_LIMIT,
) -> Response:
    try:
        page = list_events(container.uow, client.id, after=after, event_type=type, limit=limit)
    except InvalidEventQuery as error:
        raise Problem(400, "invalid-request", str(error)) from None
    return JSONResponse(
        {"data": [event_document(e) for e in page.events], "has_more": page.has_more}
    )


@router.get(
    "/{event_id}",
    summary="Read one of your events",
    response_model=EventOut,
    responses={404: problem("No such event"), **AUTH_ERRORS},
)
def get_one_event(container: ContainerDep, client: MerchantClient, event_id: str) -> Response:
    event = get_event(container.uow, event_id, client_id=client.id)
    if event is None:
        raise Problem(404, "not-found", "No such event exists.")
    return JSONResponse(event_document(event))
