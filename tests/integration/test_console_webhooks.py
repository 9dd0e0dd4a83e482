"""The console's webhook pages over real HTTP (SQLite and PostgreSQL): the endpoints page,
an event's deliveries linked from its payment, and the redeliver form (CSRF, a reason, the
same service as the ops API)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.integration.console_helpers import post_form, signed_in
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.webhook_helpers import (
    client_of,
    delivery_rows,
    event_ids,
    finished_payment,
    register,
)

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url, webhook_allow_private=True) as running:
        yield running


def _event(api: Api) -> tuple[str, str]:
    payment_id = finished_payment(api.container, client_of(api.container, api.client_a_id), "c1")
    (event_id,) = event_ids(api.container)
    return payment_id, event_id


def test_the_payment_page_links_its_events_and_the_event_page_shows_its_deliveries(
    api: Api,
) -> None:
    with api.client() as merchant:
        endpoint = merchant.post(
            "/v1/webhook_endpoints",
            json={"url": "http://127.0.0.1:9/hooks", "events": ["*"], "description": HOSTILE},
        ).json()
    payment_id, event_id = _event(api)
    relay = api.container.relay()
    try:
        relay.run_once()  # port 9 (discard) refuses: one failed attempt recorded
    finally:
        relay.close()
    client, _token = signed_in(api)
    with closing(client):
        payment_page = client.get(f"/ops/payments/{payment_id}")
        event_page = client.get(f"/ops/events/{event_id}")
        endpoints_page = client.get("/ops/webhooks")
        unknown = client.get("/ops/events/evt_" + "0" * 32)

    assert f'href="/ops/events/{event_id}"' in payment_page.text
    assert event_page.status_code == 200
    assert "connect_error" in event_page.text and "pending" in event_page.text
    assert endpoints_page.status_code == 200 and endpoint["id"] in endpoints_page.text
    assert HOSTILE not in endpoints_page.text and "&lt;script&gt;" in endpoints_page.text
    assert unknown.status_code == 404


def test_redeliver_needs_the_csrf_token_and_a_reason_and_is_audited(api: Api) -> None:
    register(api, "http://127.0.0.1:9/hooks")
    payment_id, event_id = _event(api)
    relay = api.container.relay()
    try:
        relay.run_once()
    finally:
        relay.close()
    before = delivery_rows(api.container)[0]
    client, token = signed_in(api)
    path = f"/ops/events/{event_id}/redeliver"
    with closing(client):
        for forged in (None, "", "wrong"):
            answer = post_form(client, path, csrf_token=forged, reason="forged")
            assert answer.status_code == 403
        no_reason = post_form(client, path, csrf_token=token, reason="  ")
        assert delivery_rows(api.container)[0].window_started_at == before.window_started_at
        done = post_form(client, path, csrf_token=token, reason="merchant asked (console)")
        shown = client.get(done.headers["location"])

    assert no_reason.status_code == 400 and "reason" in no_reason.text
    assert done.status_code == 303
    assert done.headers["location"].startswith(f"/ops/events/{event_id}?done=")
    after = delivery_rows(api.container)[0]
    assert after.window_started_at > before.window_started_at
    assert "merchant asked (console)" in shown.text and "redeliver" in shown.text
    with api.container.uow() as uow:
        (entry,) = uow.audit.list(payment_id=payment_id)
    assert entry.action == "redeliver" and event_id in entry.reason
