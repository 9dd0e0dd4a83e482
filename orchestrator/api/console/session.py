"""The console's session: a signed, expiring cookie naming the ops API client.

Hazards and what answers them:

* forgery: the cookie is signed with ``SECRET_KEY`` (itsdangerous, HMAC-SHA1 over a key
  derived with a salt of its own, so a session can never be confused with another signed
  value); a changed byte fails the signature;
* theft by script: ``HttpOnly``; cross-site use: ``SameSite=Strict`` plus a CSRF token in
  every form (the token lives in the signed session, so it cannot be set by an attacker);
* a session outliving its key: every request re-reads the API client, so revoking the ops
  key ends its sessions at once; the signature's timestamp bounds the rest to
  ``CONSOLE_SESSION_MINUTES``;
* sign-out: the cookie is deleted in the browser.  A copy taken before sign-out would stay
  valid until it expires (stateless sessions); revoke the key if a cookie may have leaked.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

from orchestrator.settings import Settings

SESSION_COOKIE = "payorch_console"
SIGN_IN_COOKIE = "payorch_console_signin"
COOKIE_PATH = "/ops"
# The sign-in form's CSRF token (before there is a session) is good for this long.
SIGN_IN_FORM_SECONDS = 30 * 60


@dataclass(frozen=True)
class ConsoleSession:
    client_id: str
    csrf_token: str


def _serializer(settings: Settings, purpose: str) -> URLSafeTimedSerializer:
    # itsdangerous signs with the LAST key of a list and verifies with any: the ring reversed,
    # so a cookie signed before a rotation stays valid until its previous key is dropped.
    return URLSafeTimedSerializer(
        list(reversed(settings.secret_key_ring)), salt=f"payorch-console-{purpose}"
    )


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def issue_session(settings: Settings, client_id: str) -> tuple[str, ConsoleSession]:
    session = ConsoleSession(client_id=client_id, csrf_token=new_csrf_token())
    value = _serializer(settings, "session").dumps({"c": client_id, "x": session.csrf_token})
    return value, session


def read_session(settings: Settings, value: str | None) -> ConsoleSession | None:
    if not value:
        return None
    try:
        data = _serializer(settings, "session").loads(
            value, max_age=settings.console_session_minutes * 60
        )
    except BadSignature:  # also SignatureExpired
        return None
    if not isinstance(data, dict):
        return None
    client_id, csrf = data.get("c"), data.get("x")
    if not isinstance(client_id, str) or not isinstance(csrf, str):
        return None
    return ConsoleSession(client_id=client_id, csrf_token=csrf)


def issue_sign_in_token(settings: Settings) -> tuple[str, str]:
    """(cookie value, form token) for the sign-in form: double submit, and the cookie is
    signed so a sibling subdomain cannot plant a matching pair."""
    token = new_csrf_token()
    return _serializer(settings, "sign-in").dumps(token), token


def sign_in_token_matches(settings: Settings, cookie: str | None, submitted: str | None) -> bool:
    if not cookie or not submitted:
        return False
    try:
        expected = _serializer(settings, "sign-in").loads(cookie, max_age=SIGN_IN_FORM_SECONDS)
    except BadSignature:
        return False
    return isinstance(expected, str) and hmac.compare_digest(expected, submitted)


def csrf_matches(session: ConsoleSession, submitted: str | None) -> bool:
    return bool(submitted) and hmac.compare_digest(session.csrf_token, submitted or "")
