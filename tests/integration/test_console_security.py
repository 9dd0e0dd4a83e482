"""The ops console's security (issue 15): sessions, the merchant key, CSRF, cookie flags,
escaping and headers, over real HTTP on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta

import pytest
from itsdangerous import URLSafeTimedSerializer

from orchestrator.api.console.session import issue_session
from orchestrator.services.api_keys import revoke_client
from tests.harness.seeds import accept, force, reload
from tests.integration.console_helpers import (
    SESSION_COOKIE,
    browser,
    csrf_token,
    post_form,
    session_cookie_header,
    set_cookie_headers,
    sign_in,
    signed_in,
)
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.lease_helpers import expire_leases

PROBLEM_JSON = "application/problem+json"
HOSTILE = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def _merchant(api: Api):
    with api.container.uow() as uow:
        client = uow.clients.get(api.client_a_id)
    assert client is not None
    return client


def _stuck_payment(api: Api, key: str = "stuck") -> str:
    payment_id = accept(api.container, _merchant(api), key).id
    expire_leases(api.container, [payment_id], ago=timedelta(minutes=1))
    return payment_id


def _audit_rows(api: Api, payment_id: str) -> int:
    with api.container.uow() as uow:
        return len(uow.audit.list(payment_id=payment_id))


PAGES = ["/ops/", "/ops/queues", "/ops/charts", "/ops/payments", "/ops/fragments/overview"]


def test_without_a_session_every_page_and_form_redirects_to_sign_in(api: Api) -> None:
    payment_id = _stuck_payment(api)
    token = reload(api.container, payment_id).lease_token
    with browser(api) as client:
        for path in [*PAGES, f"/ops/payments/{payment_id}"]:
            answer = client.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["location"].startswith("/ops/sign-in?next=")
        for action in ("takeover", "retry"):
            answer = post_form(client, f"/ops/payments/{payment_id}/{action}", reason="r")
            assert answer.status_code == 303
            assert answer.headers["location"].startswith("/ops/sign-in")
    assert reload(api.container, payment_id).lease_token == token
    assert _audit_rows(api, payment_id) == 0


def test_a_merchant_key_cannot_sign_in(api: Api) -> None:
    with browser(api) as client:
        answer = sign_in(client, api.key_a)
        assert answer.status_code == 403
        assert "merchant key" in answer.text
        assert not any(h.startswith(f"{SESSION_COOKIE}=") for h in set_cookie_headers(answer))
        assert client.get("/ops/").status_code == 303


def test_an_unknown_key_cannot_sign_in(api: Api) -> None:
    with browser(api) as client:
        answer = sign_in(client, "pok_" + "x" * 43)
        assert answer.status_code == 401
        assert client.get("/ops/").status_code == 303


def test_sign_in_without_the_forms_token_is_refused(api: Api) -> None:
    with browser(api) as client:
        client.get("/ops/sign-in")
        for token in (None, "forged"):
            answer = post_form(
                client, "/ops/sign-in", csrf_token=token, api_key=api.ops_key, next="/ops/"
            )
            assert answer.status_code == 403
            assert not any(h.startswith(f"{SESSION_COOKIE}=") for h in set_cookie_headers(answer))
        assert client.get("/ops/").status_code == 303


def test_a_form_with_a_missing_or_wrong_csrf_token_is_403_and_changes_nothing(api: Api) -> None:
    payment_id = _stuck_payment(api)
    before = reload(api.container, payment_id)
    client, token = signed_in(api)
    other_client, other_token = signed_in(api)  # a second session of the same operator
    path = f"/ops/payments/{payment_id}/takeover"
    with closing(client), closing(other_client):
        for forged in (None, "", "wrong", other_token, token + "x"):
            answer = post_form(client, path, csrf_token=forged, reason="forged request")
            assert answer.status_code == 403, forged
            assert answer.headers["content-type"] == PROBLEM_JSON
            assert answer.json()["type"].endswith("/csrf-failed")
        assert reload(api.container, payment_id).lease_token == before.lease_token
        assert _audit_rows(api, payment_id) == 0

        # The session's own token works: the refusals above were about the token alone.
        answer = post_form(client, path, csrf_token=token, reason="worker host lost")
        assert answer.status_code == 303
        assert reload(api.container, payment_id).lease_token == before.lease_token + 1
        assert _audit_rows(api, payment_id) == 1


def test_sign_out_needs_the_csrf_token_and_clears_the_cookie(api: Api) -> None:
    client, token = signed_in(api)
    with closing(client):
        assert post_form(client, "/ops/sign-out", unrelated="x").status_code == 403
        assert client.get("/ops/").status_code == 200
        answer = post_form(client, "/ops/sign-out", csrf_token=token)
        assert answer.status_code == 303
        assert 'payorch_console=""' in session_cookie_header(answer)
        assert client.get("/ops/").status_code == 303


def test_the_session_cookie_is_httponly_samesite_strict_scoped_and_expiring(api: Api) -> None:
    with browser(api) as client:
        header = session_cookie_header(sign_in(client, api.ops_key)).lower()
    assert "httponly" in header
    assert "samesite=strict" in header
    assert "path=/ops" in header
    assert f"max-age={api.container.settings.console_session_minutes * 60}" in header
    assert "secure" not in header.split(";")[1:]  # plain http on a dev machine


def test_the_session_cookie_is_secure_when_configured(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'secure.sqlite3'}"
    with running_api(url, console_secure_cookie=True) as api, browser(api) as client:
        form = client.get("/ops/sign-in")
        [sign_in_cookie] = set_cookie_headers(form)
        assert "; secure" in sign_in_cookie.lower()
        # An HTTPS browser would send the Secure cookie back; over plain http we do it by hand.
        answer = client.post(
            "/ops/sign-in",
            data={"csrf_token": csrf_token(form.text), "api_key": api.ops_key, "next": "/ops/"},
            headers={"Cookie": sign_in_cookie.split(";")[0]},
        )
        assert answer.status_code == 303
        assert "; secure" in session_cookie_header(answer).lower()


def test_tampered_foreign_and_merchant_sessions_are_refused(api: Api) -> None:
    settings = api.container.settings
    with browser(api) as client:
        value = session_cookie_header(sign_in(client, api.ops_key)).split(";")[0].split("=", 1)[1]
    forged_with_other_key = URLSafeTimedSerializer(
        "another-secret-key-0123456789abcdef", salt="payorch-console-session"
    ).dumps({"c": "cli_whoever", "x": "t"})
    merchant_session, _ = issue_session(settings, api.client_a_id)  # right key, wrong role
    for cookie in (value[:-2] + "xx", forged_with_other_key, merchant_session, "garbage"):
        with browser(api) as client:
            client.cookies.set(SESSION_COOKIE, cookie, path="/ops")
            answer = client.get("/ops/queues")
            assert answer.status_code == 303, cookie
            assert answer.headers["location"].startswith("/ops/sign-in")


def test_revoking_the_ops_key_ends_its_sessions(api: Api) -> None:
    client, _token = signed_in(api)
    with closing(client):
        with api.container.uow() as uow:
            ops = next(c for c in uow.clients.list() if c.name == "operator")
        revoke_client(api.container.uow, ops.id)
        assert client.get("/ops/").status_code == 303


def test_sign_in_redirects_only_inside_the_console(api: Api) -> None:
    for target in ("https://evil.example/", "//evil.example/ops/", "/v1/payments", "/ops/queues"):
        with browser(api) as client:
            answer = sign_in(client, api.ops_key, next_path=target)
            expected = target if target == "/ops/queues" else "/ops/"
            assert answer.headers["location"] == expected


def test_every_page_renders_user_data_as_text(api: Api) -> None:
    payment_id = accept(api.container, _merchant(api), "order-<b>1</b>").id
    force(
        api.container,
        payment_id,
        description=HOSTILE,
        customer_reference="<script>ref</script>",
        last_error=HOSTILE,
        status="needs_attention",
        lease_owner=None,
        locked_until=None,
    )
    client, _token = signed_in(api)
    with closing(client):
        pages = [
            f"/ops/payments/{payment_id}",
            "/ops/queues",
            "/ops/payments",
            "/ops/payments?q=%3Cscript%3Eref%3C%2Fscript%3E",
        ]
        for path in pages:
            body = client.get(path).text
            assert "<script>alert(1)" not in body, path
            assert "<script>ref" not in body, path
            assert "<img src=x" not in body, path
            assert "<b>1</b>" not in body, path
        page = client.get(f"/ops/payments/{payment_id}").text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "order-&lt;b&gt;1&lt;/b&gt;" in page


def test_pages_forbid_foreign_scripts_framing_and_caching(api: Api) -> None:
    client, _token = signed_in(api)
    with closing(client):
        for path in ["/ops/", "/ops/queues", "/ops/sign-in"]:
            headers = client.get(path, follow_redirects=True).headers
            policy = headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert headers["x-frame-options"] == "DENY"
            assert headers["cache-control"] == "no-store"


def test_a_takeover_without_a_reason_is_refused_on_the_page(api: Api) -> None:
    payment_id = _stuck_payment(api)
    token_before = reload(api.container, payment_id).lease_token
    client, token = signed_in(api)
    with closing(client):
        answer = post_form(
            client, f"/ops/payments/{payment_id}/takeover", csrf_token=token, reason="  "
        )
    assert answer.status_code == 400
    assert "Give a reason" in answer.text
    assert reload(api.container, payment_id).lease_token == token_before
    assert _audit_rows(api, payment_id) == 0


def test_a_form_that_is_not_urlencoded_is_refused(api: Api) -> None:
    payment_id = _stuck_payment(api)
    client, token = signed_in(api)
    with closing(client):
        answer = client.post(
            f"/ops/payments/{payment_id}/takeover",
            json={"csrf_token": token, "reason": "json is not a form"},
        )
    assert answer.status_code == 415
    assert answer.headers["content-type"] == PROBLEM_JSON
    assert _audit_rows(api, payment_id) == 0


def test_the_sign_in_page_token_is_a_fresh_random_value(api: Api) -> None:
    with browser(api) as one, browser(api) as two:
        assert csrf_token(one.get("/ops/sign-in").text) != csrf_token(two.get("/ops/sign-in").text)
