"""The console's sign-in and sign-out: an ops client's API key, checked once, exchanged
for a signed session cookie (``session``); the sign-in form carries its own CSRF token.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.console.guard import (
    CurrentUser,
    clear_session,
    read_form,
    require_csrf,
    safe_next,
)
from orchestrator.api.console.rendering import redirect, render_page
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
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import authenticate

router = APIRouter(prefix="/ops", include_in_schema=False)


@router.get("")
def console_root() -> Response:
    return redirect("/ops/")


def _sign_in_page(
    request: Request, container: Container, *, next_path: str, error: str | None, status: int
) -> Response:
    cookie, token = issue_sign_in_token(container.settings)
    response = render_page(
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
            return redirect(safe_next(next))
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
    response = redirect(next_path)
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
    response = redirect("/ops/sign-in")
    clear_session(response)
    return response
