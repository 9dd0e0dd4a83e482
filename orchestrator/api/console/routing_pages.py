"""The console's routing pages: every merchant's rules (``/ops/routing``) and one
merchant's rules with its recent routing decisions (``/ops/routing/{client_id}``): the
payments with the route each was given, the rule that chose it and the accounts skipped.
Read-only: merchants change their rules with ``PUT /v1/routing``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.api.console.guard import CurrentUser
from orchestrator.api.console.rendering import render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.ops.routing import merchant_routing, merchant_routings

router = APIRouter(prefix="/ops", include_in_schema=False)


@router.get("/routing")
def routing(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    return render_page(
        request,
        "routing.html",
        user,
        page="routing",
        merchants=merchant_routings(container.read_only_uow),
    )


@router.get("/routing/{client_id}")
def merchant(
    request: Request, container: ContainerDep, user: CurrentUser, client_id: str
) -> Response:
    detail = merchant_routing(container.read_only_uow, client_id)
    return render_page(
        request,
        "routing_merchant.html",
        user,
        status_code=200 if detail is not None else 404,
        page="routing",
        detail=detail,
    )
