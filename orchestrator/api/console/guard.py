"""Who is signed in to the console, form bodies, and the CSRF check.

A request without a valid session is redirected to the sign-in page (``303``); a form
without the session's CSRF token is refused with a ``403`` problem before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from orchestrator.api.body import payload_too_large, read_capped
from orchestrator.api.console.session import (
    COOKIE_PATH,
    SESSION_COOKIE,
    ConsoleSession,
    csrf_matches,
    read_session,
)
from orchestrator.api.deps import ContainerDep
from orchestrator.api.problems import Problem
from orchestrator.domain.model import ApiClient, Role
from orchestrator.engine.takeover import Actor

# A console form carries a reason of at most 1000 characters and a token.
MAX_FORM_BYTES = 16 * 1024
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


@dataclass(frozen=True)
class ConsoleUser:
    client: ApiClient
    session: ConsoleSession

    @property
    def actor(self) -> Actor:
        # The same actor the ops API uses for this key: the audit row names the ops client.
        return Actor.operator(self.client.id, self.client.name)


def console_user(request: Request, container: ContainerDep) -> ConsoleUser:
    session = read_session(container.settings, request.cookies.get(SESSION_COOKIE))
    client = None
    if session is not None:
        with container.uow(read_only=True) as uow:
            client = uow.clients.get(session.client_id)
    # Re-checked on every request: a revoked key (or one whose role changed) signs out.
    if client is None or client.revoked_at is not None or client.role is not Role.OPS:
        raise SignInRequired(_next_path(request))
    request.state.client_id = client.id
    assert session is not None
    return ConsoleUser(client=client, session=session)


CurrentUser = Annotated[ConsoleUser, Depends(console_user)]


def _next_path(request: Request) -> str:
    path = request.url.path
    if request.method != "GET" or request.url.path.startswith("/ops/fragments/"):
        return "/ops/"
    return path + (f"?{request.url.query}" if request.url.query else "")


def safe_next(value: str | None) -> str:
    """Only a path inside the console: never an open redirect to another site."""
    if (
        value
        and value.startswith("/ops/")
        and not value.startswith("//")
        and "\\" not in value
        and all(ch.isprintable() for ch in value)
    ):
        return value
    return "/ops/"


async def read_form(request: Request) -> dict[str, str]:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != FORM_MEDIA_TYPE:
        raise Problem(415, "unsupported-media-type", f"Send the form as {FORM_MEDIA_TYPE}.")
    body = await read_capped(request, MAX_FORM_BYTES)
    if body is None:
        raise payload_too_large(MAX_FORM_BYTES, "The form")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(400, "invalid-request", "The form is not UTF-8.") from None
    fields = parse_qs(text, keep_blank_values=True, max_num_fields=20)
    return {name: values[-1] for name, values in fields.items()}


def require_csrf(user: ConsoleUser, form: dict[str, str]) -> None:
    if not csrf_matches(user.session, form.get("csrf_token")):
        raise Problem(
            403,
            "csrf-failed",
            "The form's CSRF token is missing or does not belong to this session; "
            "reload the page and submit again. Nothing was changed.",
        )


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)


async def _on_sign_in_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    response = RedirectResponse(f"/ops/sign-in?next={quote(exc.next_path)}", status_code=303)
    if SESSION_COOKIE in request.cookies:
        clear_session(response)
    return response


def install_sign_in_redirect(app: FastAPI) -> None:
    app.add_exception_handler(SignInRequired, _on_sign_in_required)
