"""The console's queues page lists the payments waiting for their customer (requires_action)
with their re-check and timeout, marking those past half their timeout (over real HTTP,
SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta

import pytest

from tests.harness.seeds import accept, force
from tests.integration.console_helpers import signed_in
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.webhook_helpers import client_of

TIMEOUT_SECONDS = 3600.0


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url, action_timeout_seconds=TIMEOUT_SECONDS) as running:
        yield running


def _waiting_for_customer(api: Api, key: str, *, since: timedelta) -> str:
    merchant = client_of(api.container, api.client_a_id)
    payment_id = accept(api.container, merchant, key).id
    with api.container.uow() as uow:
        now = uow.now()
    force(
        api.container,
        payment_id,
        waiting_for="customer",
        waiting_since=now - since,
        next_attempt_at=now + timedelta(seconds=300),
        lease_owner=None,
        locked_until=None,
    )
    return payment_id


def test_the_queues_page_lists_payments_waiting_for_their_customer(api: Api) -> None:
    fresh = _waiting_for_customer(api, "fresh", since=timedelta(minutes=5))
    late = _waiting_for_customer(api, "late", since=timedelta(minutes=45))
    merchant = client_of(api.container, api.client_a_id)
    busy = accept(api.container, merchant, "busy").id  # processing, not waiting: not listed

    client, _token = signed_in(api)
    with closing(client):
        page = client.get("/ops/queues")

    assert page.status_code == 200
    section = page.text[page.text.index('id="requires-action"') :]
    section = section[: section.index("</section>")]
    assert section.count('class="requires-action-row"') == 2
    assert fresh in section and late in section and busy not in section
    late_row = section[section.index(late) :]
    late_row = late_row[: late_row.index("</tr>")]
    fresh_row = section[section.index(fresh) :]
    fresh_row = fresh_row[: fresh_row.index("</tr>")]
    assert "past half its timeout" in late_row
    assert "past half its timeout" not in fresh_row


def test_status_counts_the_payments_past_half_their_authentication_timeout(api: Api) -> None:
    _waiting_for_customer(api, "fresh", since=timedelta(minutes=5))
    _waiting_for_customer(api, "late-1", since=timedelta(minutes=31))
    _waiting_for_customer(api, "late-2", since=timedelta(minutes=59))

    with api.client(api.ops_key) as ops:
        status = ops.get("/v1/ops/status")
    client, _token = signed_in(api)
    with closing(client):
        overview = client.get("/ops/fragments/overview")

    assert status.status_code == 200, status.text
    body = status.json()
    assert body["requires_action_past_half_timeout"] == 2
    assert body["payments_by_status"]["requires_action"] == 3
    assert body["healthy"] is True  # customers abandon checkouts: information, not an alarm
    card = overview.text[overview.text.index('id="requires-action-late"') :]
    assert ">2<" in card[: card.index("</a>")].replace(" ", "").replace("\n", "")
