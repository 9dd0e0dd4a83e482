"""The console's webhooks: the endpoints with their delivery counts, an event's page with
its deliveries, and the redeliver form, which calls ``redeliver_event`` (``ops.events``),
what ``POST /v1/ops/events/{id}/redeliver`` calls.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.console.guard import (
    ConsoleUser,
    CurrentUser,
    read_form,
    require_csrf,
)
from orchestrator.api.console.rendering import redirect, render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.events.event_documents import event_document
from orchestrator.ops.errors import InvalidReason
from orchestrator.ops.events import (
    EventNotFound,
    event_deliveries,
    list_all_endpoints,
    redeliver_event,
)

router = APIRouter(prefix="/ops", include_in_schema=False)


@router.get("/webhooks")
def webhooks(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    endpoints, stats = list_all_endpoints(container.uow)
    return render_page(
        request, "webhooks.html", user, page="webhooks", endpoints=endpoints, stats=stats
    )


def _event_page(
    request: Request,
    container: Container,
    user: ConsoleUser,
    event_id: str,
    *,
    done: int | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    try:
        found = event_deliveries(container.uow, event_id)
    except EventNotFound:
        return render_page(request, "not_found.html", user, status_code=404, page="webhooks")
    done_entry = None
    if done is not None:
        with container.uow(read_only=True) as uow:
            entries = uow.audit.list(payment_id=found.event.payment_id, limit=50)
        done_entry = next((a for a in entries if a.id == done), None)
    return render_page(
        request,
        "event.html",
        user,
        status_code=status_code,
        page="webhooks",
        event=found.event,
        deliveries=found.deliveries,
        published=bool(found.deliveries),
        body=json.dumps(event_document(found.event), indent=2),
        done=done_entry,
        error=error,
    )


@router.get("/events/{event_id}")
def event(
    request: Request,
    container: ContainerDep,
    user: CurrentUser,
    event_id: str,
    done: int | None = None,
) -> Response:
    return _event_page(request, container, user, event_id, done=done)


@router.post("/events/{event_id}/redeliver")
async def redeliver(
    request: Request, container: ContainerDep, user: CurrentUser, event_id: str
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    try:
        done = await run_in_threadpool(
            redeliver_event, container.uow, user.actor, event_id, reason=form.get("reason", "")
        )
    except EventNotFound:
        return await run_in_threadpool(_event_page, request, container, user, event_id)
    except InvalidReason as refused:
        return await run_in_threadpool(
            _event_page,
            request,
            container,
            user,
            event_id,
            error=refused.message,
            status_code=400,
        )
    return redirect(f"/ops/events/{done.event.public_id}?done={done.audit.id}")
