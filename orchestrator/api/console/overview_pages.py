"""The console's overview (``/ops/``, refreshed live through its fragment) and the queues
page: leases expired, active and parked, and payments waiting for their customer; the
same reads as ``GET /v1/ops/status`` and ``GET /v1/ops/leases``.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.api.console.guard import CurrentUser
from orchestrator.api.console.rendering import render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.domain.lease_state import LeaseState
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.ops.lease_documents import lease_state
from orchestrator.ops.lease_reads import list_leases
from orchestrator.ops.payment_reads import list_payments
from orchestrator.ops.status import get_status

QUEUE_LIMIT = 100

router = APIRouter(prefix="/ops", include_in_schema=False)


@router.get("/")
def overview(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    return render_page(
        request,
        "overview.html",
        user,
        status=get_status(container.read_only_uow, container.settings),
        page="overview",
    )


@router.get("/fragments/overview")
def overview_fragment(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    return render_page(
        request,
        "_overview_cards.html",
        user,
        status=get_status(container.read_only_uow, container.settings),
    )


@router.get("/queues")
def queues(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    expired = list_leases(container.read_only_uow, LeaseState.EXPIRED, limit=QUEUE_LIMIT)
    active = list_leases(container.read_only_uow, LeaseState.ACTIVE, limit=QUEUE_LIMIT)
    parked = list_leases(container.read_only_uow, LeaseState.NEEDS_ATTENTION, limit=QUEUE_LIMIT)
    waiting = list_payments(
        container.read_only_uow,
        PaymentFilters(status=PaymentStatus.REQUIRES_ACTION),
        limit=QUEUE_LIMIT,
    )
    timeout = timedelta(seconds=container.settings.action_timeout_seconds)
    return render_page(
        request,
        "queues.html",
        user,
        page="queues",
        now=expired.now,
        expired=expired.records,
        active=[(r, lease_state(r, active.now)) for r in active.records],
        parked=parked.records,
        # (payment, when its authentication times out, past half of its timeout?)
        requires_action=[
            (
                r,
                r.waiting_since + timeout if r.waiting_since else None,
                r.waiting_since is not None and waiting.now - r.waiting_since > timeout / 2,
            )
            for r in waiting.records
        ],
    )
