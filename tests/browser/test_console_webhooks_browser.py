"""Issue 15's webhook part in a real browser (Debian's Chromium): an operator follows a
payment's event to its deliveries, redelivers it with a reason, and sees the second
delivery arrive — signed, verified by a real receiver on 127.0.0.1, with the same id."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.test_console_pages import SCREENSHOTS
from tests.integration.hardening_helpers import Api, running_api, sqlite_url
from tests.integration.webhook_helpers import client_of, event_ids, finished_payment, register
from tests.support.webhook_receiver import WebhookReceiver


@pytest.fixture
def api(tmp_path) -> Iterator[Api]:
    with running_api(sqlite_url(tmp_path), webhook_allow_private=True) as running:
        yield running


def test_an_operator_redelivers_a_webhook_and_sees_it_delivered_again(api, open_console) -> None:
    relay = api.container.relay(name="relay-browser")
    with WebhookReceiver() as receiver:
        receiver.secrets.append(register(api, receiver.url)["secret"])
        merchant = client_of(api.container, api.client_a_id)
        payment_id = finished_payment(api.container, merchant, "browser-hook")
        relay.run_once()
        (event_id,) = event_ids(api.container)
        assert receiver.delivered_ids() == {event_id}

        console = open_console(api.url)
        console.sign_in(api.ops_key)
        console.open(f"/ops/payments/{payment_id}")
        events = console.text("#events")
        assert event_id in events and "delivered" in events
        console.page.get_by_role("link", name=event_id).click()
        console.page.wait_for_url(re.compile(f".*/ops/events/{event_id}$"))
        assert "1 attempts" in console.text("#deliveries")

        console.page.get_by_label("reason").fill("merchant lost it (browser test)")
        console.page.get_by_role("button", name="Redeliver").click()
        console.page.wait_for_url(re.compile(f".*/ops/events/{event_id}\\?done=\\d+$"))
        done = console.text("#action-done")
        assert "redeliver" in done and "merchant lost it (browser test)" in done

        relay.run_once()
        console.wait_until(
            f"/ops/events/{event_id}",
            lambda: "2 attempts" in console.text("#deliveries"),
            what="the redelivery's attempt",
        )
        console.screenshot(SCREENSHOTS / "event.png")
        log = console.text("#deliveries")
        assert log.count("delivered") >= 3  # the status pill and both attempts' outcomes
        console.open(f"/ops/payments/{payment_id}")
        assert "merchant lost it (browser test)" in console.text("#audit")
        console.open("/ops/webhooks")
        assert "enabled" in console.text("#endpoints")
        console.screenshot(SCREENSHOTS / "webhooks.png")
    relay.close()

    # The receiver got the event twice, under one webhook-id, both verified.
    assert [r.webhook_id for r in receiver.received] == [event_id, event_id]
    assert receiver.unverified() == []
    assert console.foreign_requests == []
