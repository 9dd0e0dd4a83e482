"""The console's payments: the searchable list, a payment's page, and its takeover and
retry forms, which call ``take_over_payment`` and ``retry_payment`` (``ops.commands``),
exactly what ``POST /v1/ops/payments/{id}/takeover|retry`` call, under the signed-in ops
client.  The capture and cancel forms on the same page are in ``capture_forms``.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import get_args

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.capture_schemas import CancellationReason
from orchestrator.api.console.attempts import attempt_rows
from orchestrator.api.console.guard import (
    ConsoleUser,
    CurrentUser,
    read_form,
    require_csrf,
)
from orchestrator.api.console.rendering import redirect, render_page
from orchestrator.api.console.timeline import build_timeline
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import OperationKindName
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.ops.commands import OperatorAction, retry_payment, take_over_payment
from orchestrator.ops.errors import (
    InvalidCursor,
    InvalidReason,
    OpsError,
    PaymentNotFound,
)
from orchestrator.ops.lease_documents import lease_state
from orchestrator.ops.payment_reads import get_payment_detail, list_payments
from orchestrator.services.captures import cancelable

PAGE_SIZE = 50

router = APIRouter(prefix="/ops", include_in_schema=False)


def _day(value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


@router.get("/payments")
def payments(
    request: Request,
    container: ContainerDep,
    user: CurrentUser,
    q: str | None = None,
    status: str | None = None,
    client_id: str | None = None,
    created_from: str | None = None,
    created_to: str | None = None,
    cursor: str | None = None,
) -> Response:
    q = (q or "").strip()[:255] or None
    if q is not None and is_payment_id(q):
        return redirect(f"/ops/payments/{q}")
    known_status = status if status in {s.value for s in PaymentStatus} else None
    start, end = _day(created_from), _day(created_to)
    filters = PaymentFilters(
        status=PaymentStatus(known_status) if known_status else None,
        client_id=(client_id or "").strip()[:40] or None,
        text=q,
        created_after=datetime.combine(start, time(), UTC) if start else None,
        # "to" a day includes that whole day; "to" the last day there is bounds nothing
        # (its next day has no datetime: adding one raised OverflowError, a 500).
        created_before=(
            datetime.combine(end, time(), UTC) + timedelta(days=1)
            if end and end < date.max
            else None
        ),
    )
    error = None
    try:
        page = list_payments(
            container.read_only_uow, filters, limit=PAGE_SIZE, cursor=cursor or None
        )
    except InvalidCursor as invalid:
        error = invalid.message
        page = list_payments(container.read_only_uow, filters, limit=PAGE_SIZE)
    query = {
        "q": q or "",
        "status": known_status or "",
        "client_id": filters.client_id or "",
        "created_from": start.isoformat() if start else "",
        "created_to": end.isoformat() if end else "",
    }
    return render_page(
        request,
        "payments.html",
        user,
        status_code=400 if error else 200,
        page="payments",
        result=page,
        query=query,
        statuses=[s.value for s in PaymentStatus],
        error=error,
    )


def payment_page(
    request: Request,
    container: Container,
    user: ConsoleUser,
    payment_id: str,
    *,
    done: int | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    detail = (
        get_payment_detail(container.read_only_uow, payment_id)
        if is_payment_id(payment_id)
        else None
    )
    if detail is None:
        return render_page(request, "not_found.html", user, status_code=404, page="payments")
    done_entry = next((a for a in detail.audit if a.id == done), None)
    record = detail.record
    shown_status = "requires_action" if record.requires_action else record.status.value
    return render_page(
        request,
        "payment.html",
        user,
        status_code=status_code,
        page="payments",
        detail=detail,
        record=detail.record,
        state=lease_state(detail.record, detail.now),
        timeline=build_timeline(detail),
        attempts=attempt_rows(detail, shown_status),
        refunds=[
            (op, lease_state(op, detail.now))
            for op in detail.operations
            if op.kind is OperationKindName.REFUND
        ],
        captures=[
            (op, lease_state(op, detail.now))
            for op in detail.operations
            if op.kind in (OperationKindName.CAPTURE, OperationKindName.CANCEL)
        ],
        can_capture=detail.record.status is PaymentStatus.REQUIRES_CAPTURE,
        can_cancel=cancelable(detail.record),
        cancellation_reasons=get_args(CancellationReason),
        done=done_entry,
        error=error,
    )


@router.get("/payments/{payment_id}")
def payment(
    request: Request,
    container: ContainerDep,
    user: CurrentUser,
    payment_id: str,
    done: int | None = None,
) -> Response:
    return payment_page(request, container, user, payment_id, done=done)


def _status_of(error: OpsError) -> int:
    if isinstance(error, InvalidReason):
        return 400
    if isinstance(error, PaymentNotFound):
        return 404
    return 409


async def _act(
    request: Request,
    container: Container,
    user: ConsoleUser,
    payment_id: str,
    command: str,
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    reason = form.get("reason", "")
    action: OperatorAction
    try:
        if command == "takeover":
            action = await run_in_threadpool(
                take_over_payment,
                container.uow,
                container.publisher,
                container.settings,
                user.actor,
                payment_id,
                reason=reason,
                force=form.get("force") == "yes",
            )
        else:
            action = await run_in_threadpool(
                retry_payment,
                container.uow,
                container.publisher,
                container.settings,
                user.actor,
                payment_id,
                reason=reason,
            )
    except OpsError as refused:
        return await run_in_threadpool(
            payment_page,
            request,
            container,
            user,
            payment_id,
            error=refused.message,
            status_code=_status_of(refused),
        )
    return redirect(f"/ops/payments/{payment_id}?done={action.audit.id}")


@router.post("/payments/{payment_id}/takeover")
async def takeover(
    request: Request, container: ContainerDep, user: CurrentUser, payment_id: str
) -> Response:
    return await _act(request, container, user, payment_id, "takeover")


@router.post("/payments/{payment_id}/retry")
async def retry(
    request: Request, container: ContainerDep, user: CurrentUser, payment_id: str
) -> Response:
    return await _act(request, container, user, payment_id, "retry")
