"""How every console page is answered: Jinja2 templates (autoescaped, strict), the time and
age filters, and the security headers on every response (no CDN, no inline script, no
framing, no caching).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from orchestrator.api.console.guard import ConsoleUser

HERE = Path(__file__).parent
# Everything the pages load comes from this host: no CDN, no inline script.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


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


def render_page(
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


def redirect(url: str) -> Response:
    return _secure(RedirectResponse(url, status_code=303))


# -- sign-in ---------------------------------------------------------------------------------
