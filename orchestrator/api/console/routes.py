"""The console's pages and forms (``/ops/``), excluded from the OpenAPI document.

Reads use the same query functions as the ops API and the CLI (orchestrator.ops); the
takeover and retry forms call ``take_over_payment`` and ``retry_payment``, exactly what
``POST /v1/ops/payments/{id}/takeover|retry`` call, under the signed-in ops client; the
redeliver form calls ``redeliver_event``, what ``POST /v1/ops/events/{id}/redeliver`` calls.
The capture and cancel forms are in ``capture_forms``.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any, get_args

import jinja2
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.templating import Jinja2Templates

from orchestrator.api.capture_schemas import CancellationReason
from orchestrator.api.console.guard import (
    ConsoleUser,
    CurrentUser,
    clear_session,
    install_sign_in_redirect,
    read_form,
    require_csrf,
    safe_next,
)
from orchestrator.api.console.session import (
    COOKIE_PATH,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SIGN_IN_FORM_SECONDS,
    issue_session,
    issue_sign_in_token,
    read_session,
    sign_in_token_matches,
)
from orchestrator.api.console.timeline import build_timeline
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.lease_state import LeaseState
from orchestrator.domain.model import Role
from orchestrator.domain.operations import OperationKindName
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.events.representation import event_document
from orchestrator.ops.commands import OperatorAction, retry_payment, take_over_payment
from orchestrator.ops.errors import (
    InvalidCursor,
    InvalidReason,
    OpsError,
    PaymentNotFound,
)
from orchestrator.ops.events import (
    EventNotFound,
    event_deliveries,
    list_all_endpoints,
    redeliver_event,
)
from orchestrator.ops.payments import get_payment_detail, list_payments
from orchestrator.ops.queries import list_leases
from orchestrator.ops.representation import lease_state
from orchestrator.ops.status import get_status
from orchestrator.services.api_keys import authenticate
from orchestrator.services.captures import cancelable

HERE = Path(__file__).parent
QUEUE_LIMIT = 100
PAGE_SIZE = 50
# Everything the pages load comes from this host: no CDN, no inline script.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

router = APIRouter(prefix="/ops", include_in_schema=False)


def _format_time(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _templates() -> Jinja2Templates:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        # Every value is escaped unless a template says otherwise (none does): a payment
        # description of "<script>" renders as text.
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["when"] = _format_time
    environment.filters["age"] = _format_age
    return Jinja2Templates(env=environment)


TEMPLATES = _templates()


def _secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


def _page(
    request: Request,
    template: str,
    user: ConsoleUser | None,
    *,
    status_code: int = 200,
    **context: Any,
) -> Response:
    context = {
        "user": user,
        "csrf_token": user.session.csrf_token if user else None,
        **context,
    }
    response = TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)
    return _secure(response)


def _redirect(url: str) -> Response:
    return _secure(RedirectResponse(url, status_code=303))


# -- sign-in ---------------------------------------------------------------------------------


@router.get("")
def console_root() -> Response:
    return _redirect("/ops/")


def _sign_in_page(
    request: Request, container: Container, *, next_path: str, error: str | None, status: int
) -> Response:
    cookie, token = issue_sign_in_token(container.settings)
    response = _page(
        request,
        "sign_in.html",
        None,
        status_code=status,
        sign_in_token=token,
        next_path=next_path,
        error=error,
    )
    response.set_cookie(
        SIGN_IN_COOKIE,
        cookie,
        max_age=SIGN_IN_FORM_SECONDS,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=container.settings.console_cookie_is_secure,
    )
    return response


@router.get("/sign-in")
def sign_in_form(request: Request, container: ContainerDep, next: str | None = None) -> Response:
    session = read_session(container.settings, request.cookies.get(SESSION_COOKIE))
    if session is not None:
        # Skip the form only for a session whose key still works (the pages re-check it
        # on every request anyway, and send back here when it was revoked).
        with container.uow(read_only=True) as uow:
            client = uow.clients.get(session.client_id)
        if client is not None and client.revoked_at is None and client.role is Role.OPS:
            return _redirect(safe_next(next))
    return _sign_in_page(request, container, next_path=safe_next(next), error=None, status=200)


@router.post("/sign-in")
async def sign_in(request: Request, container: ContainerDep) -> Response:
    form = await read_form(request)
    next_path = safe_next(form.get("next"))
    if not sign_in_token_matches(
        container.settings, request.cookies.get(SIGN_IN_COOKIE), form.get("csrf_token")
    ):
        return await run_in_threadpool(
            _sign_in_page,
            request,
            container,
            next_path=next_path,
            error="The sign-in form expired or was not sent by this browser; try again.",
            status=403,
        )
    client = await run_in_threadpool(
        authenticate, container.lookup_uow, form.get("api_key", "").strip()
    )
    if client is None or client.role is not Role.OPS:
        error = (
            "This is a merchant key. The console needs an API key with the 'ops' role."
            if client is not None
            else "That API key is unknown or revoked."
        )
        status = 403 if client is not None else 401
        return await run_in_threadpool(
            _sign_in_page, request, container, next_path=next_path, error=error, status=status
        )
    value, _session = issue_session(container.settings, client.id)
    response = _redirect(next_path)
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=container.settings.console_session_minutes * 60,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=container.settings.console_cookie_is_secure,
    )
    response.delete_cookie(SIGN_IN_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/sign-out")
async def sign_out(request: Request, user: CurrentUser) -> Response:
    require_csrf(user, await read_form(request))
    response = _redirect("/ops/sign-in")
    clear_session(response)
    return response


# -- overview and queues --------------------------------------------------------------------


@router.get("/")
def overview(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    return _page(
        request,
        "overview.html",
        user,
        status=get_status(container.read_only_uow, container.settings),
        page="overview",
    )


@router.get("/fragments/overview")
def overview_fragment(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    return _page(
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
    return _page(
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


# -- payments -------------------------------------------------------------------------------


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
        return _redirect(f"/ops/payments/{q}")
    known_status = status if status in {s.value for s in PaymentStatus} else None
    start, end = _day(created_from), _day(created_to)
    filters = PaymentFilters(
        status=PaymentStatus(known_status) if known_status else None,
        client_id=(client_id or "").strip()[:40] or None,
        text=q,
        created_after=datetime.combine(start, time(), UTC) if start else None,
        # "to" a day includes that whole day.
        created_before=datetime.combine(end, time(), UTC) + timedelta(days=1) if end else None,
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
    return _page(
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


def _payment_page(
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
        return _page(request, "not_found.html", user, status_code=404, page="payments")
    done_entry = next((a for a in detail.audit if a.id == done), None)
    return _page(
        request,
        "payment.html",
        user,
        status_code=status_code,
        page="payments",
        detail=detail,
        record=detail.record,
        state=lease_state(detail.record, detail.now),
        timeline=build_timeline(detail),
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
    return _payment_page(request, container, user, payment_id, done=done)


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
            _payment_page,
            request,
            container,
            user,
            payment_id,
            error=refused.message,
            status_code=_status_of(refused),
        )
    return _redirect(f"/ops/payments/{payment_id}?done={action.audit.id}")


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


# -- webhooks -------------------------------------------------------------------------------


@router.get("/webhooks")
def webhooks(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    endpoints, stats = list_all_endpoints(container.uow)
    return _page(request, "webhooks.html", user, page="webhooks", endpoints=endpoints, stats=stats)


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
        return _page(request, "not_found.html", user, status_code=404, page="webhooks")
    done_entry = None
    if done is not None:
        with container.uow(read_only=True) as uow:
            entries = uow.audit.list(payment_id=found.event.payment_id, limit=50)
        done_entry = next((a for a in entries if a.id == done), None)
    return _page(
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
    return _redirect(f"/ops/events/{done.event.public_id}?done={done.audit.id}")


def install_console(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/ops/static", StaticFiles(directory=HERE / "static"), name="console-static")
    install_sign_in_redirect(app)
