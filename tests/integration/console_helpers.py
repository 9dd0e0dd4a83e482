"""Talking to the ops console over plain HTTP (no browser): sign in, read the CSRF token a
page carries, post forms.  For the console's security tests."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.integration.hardening_helpers import Api

SESSION_COOKIE = "payorch_console"
_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def browser(api: Api) -> httpx.Client:
    """A cookie-keeping client that does not follow redirects (tests look at them)."""
    return httpx.Client(base_url=api.url, timeout=30, trust_env=False, follow_redirects=False)


def csrf_token(html: str) -> str:
    match = _TOKEN.search(html)
    assert match is not None, "no CSRF token on the page"
    return match.group(1)


def sign_in(client: httpx.Client, api_key: str, next_path: str = "/ops/") -> httpx.Response:
    form = client.get("/ops/sign-in")
    assert form.status_code == 200, form.text
    return client.post(
        "/ops/sign-in",
        data={"csrf_token": csrf_token(form.text), "api_key": api_key, "next": next_path},
    )


def signed_in(api: Api) -> tuple[httpx.Client, str]:
    """A client signed in with the ops key, and its session's CSRF token."""
    client = browser(api)
    answer = sign_in(client, api.ops_key)
    assert answer.status_code == 303, answer.text
    page = client.get("/ops/queues")
    assert page.status_code == 200, page.text
    return client, csrf_token(page.text)


def set_cookie_headers(response: httpx.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


def session_cookie_header(response: httpx.Response) -> str:
    [header] = [h for h in set_cookie_headers(response) if h.startswith(f"{SESSION_COOKIE}=")]
    return header


def post_form(client: httpx.Client, path: str, **fields: Any) -> httpx.Response:
    return client.post(path, data={k: v for k, v in fields.items() if v is not None})
