"""Every console page in a real browser, on a small realistic history (SQLite, a scripted
provider): they render, escape user data, refresh the overview live, link to an offline
``/docs``, and load nothing from another host.  Also what ``make screenshots`` runs: with
``PAYORCH_SCREENSHOTS_DIR`` set, the screenshots go there (docs/screenshots, shown on the
docs' operations page); otherwise under test-artifacts/."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import ARTIFACTS
from tests.browser.story import HOSTILE, Story, write_story
from tests.harness.seeds import accept, force
from tests.integration.hardening_helpers import Api, running_api, sqlite_url

SCREENSHOTS = Path(os.environ.get("PAYORCH_SCREENSHOTS_DIR", ARTIFACTS / "screenshots"))


@pytest.fixture
def api(tmp_path) -> Iterator[Api]:
    with running_api(sqlite_url(tmp_path)) as running:
        yield running


@pytest.fixture
def story(api) -> Story:
    return write_story(api)


def _stat(console, stat_id: str) -> str:
    return console.page.locator(f"#{stat_id} .value").inner_text()


def test_every_console_page_renders_escapes_refreshes_and_stays_on_this_host(
    api, story, open_console
):
    console = open_console(api.url)
    console.sign_in(api.ops_key)

    # Overview: the counts of the story, then a change shows up without a reload.
    assert _stat(console, "needs-attention") == "1"
    assert _stat(console, "expired") == "1"
    assert _stat(console, "count-succeeded") == "2"
    assert _stat(console, "health") == "needs a person"
    console.screenshot(SCREENSHOTS / "overview.png", full_page=False)
    parked_later = accept_parked(api)
    deadline = time.monotonic() + 15
    while _stat(console, "needs-attention") != "2":
        assert time.monotonic() < deadline, "the overview never refreshed by itself"
        time.sleep(0.25)
    assert console.page.url.endswith("/ops/")  # refreshed in place, not reloaded

    # Queues: the stuck payment with its frozen owner, the parked ones with their error.
    console.open("/ops/queues")
    assert "worker-b:31337" in console.row("expired", story.stuck).inner_text()
    assert "parked after MAX_ATTEMPTS" in console.row("needs-attention", story.parked).inner_text()
    assert console.row("needs-attention", parked_later).count() == 1
    console.screenshot(SCREENSHOTS / "queues.png")

    # Search: by customer reference, by status, by id (straight to the payment).
    console.open("/ops/payments?q=cus-77")
    assert console.page.locator("#results tbody tr").count() == 1
    console.open("/ops/payments?status=failed")
    assert story.declined in console.text("#results")
    console.open("/ops/payments")
    console.screenshot(SCREENSHOTS / "payments.png")
    console.page.get_by_label("search").fill(story.taken_over)
    console.page.get_by_role("button", name="Search").click()
    console.page.wait_for_url(re.compile(f".*/ops/payments/{story.taken_over}$"))

    # The payment page: a timeline from acceptance to the event, with the takeover.
    timeline = console.text("#timeline")
    for step in ("Accepted", "Lease taken over", "Operator takeover by alice (on call)"):
        assert step in timeline
    assert "unknown" in console.text("#provider-calls")  # the lost confirm answer
    assert "GET /v1/payment_intents/" in console.text("#provider-calls")  # queried first
    console.screenshot(SCREENSHOTS / "payment.png")

    # Webhooks: every endpoint, then an event's deliveries, reached from its payment.
    console.open("/ops/webhooks")
    console.screenshot(SCREENSHOTS / "webhooks.png")
    console.open(f"/ops/payments/{story.taken_over}")
    console.page.locator("a.event-link").first.click()
    console.page.wait_for_url(re.compile(r".*/ops/events/evt_[0-9a-f]+$"))
    assert "payment.succeeded" in console.text("main")
    console.screenshot(SCREENSHOTS / "event.png")

    # User data is text, never markup: the hostile description shows as typed.
    console.open(f"/ops/payments/{story.parked}")
    assert console.text("#description") == HOSTILE
    assert console.page.locator("#description img, #description script").count() == 0

    # /docs: Swagger UI from this host, and it reads our OpenAPI document.
    console.open("/ops/")
    console.page.get_by_role("link", name="API docs").click()
    console.page.wait_for_selector(".swagger-ui .info .title")
    assert "payorch" in console.text(".swagger-ui .info .title")
    console.screenshot(SCREENSHOTS / "docs.png", full_page=False)

    console.open("/ops/sign-in")  # signed in: straight back to the overview
    assert console.page.url.endswith("/ops/")
    assert console.foreign_requests == []


def accept_parked(api: Api) -> str:
    with api.container.uow() as uow:
        merchant = uow.clients.get(api.client_a_id)
    assert merchant is not None
    payment_id = accept(api.container, merchant, "parked-later").id
    force(api.container, payment_id, status="needs_attention", lease_owner=None, locked_until=None)
    return payment_id


def test_signing_out_ends_the_session_in_the_browser(api, open_console):
    console = open_console(api.url)
    console.sign_in(api.ops_key)
    console.page.get_by_role("button", name="Sign out").click()
    console.page.wait_for_url(re.compile(r".*/ops/sign-in$"))
    console.open("/ops/queues")
    assert "/ops/sign-in" in console.page.url
    assert [c for c in console.page.context.cookies() if c["name"] == "payorch_console"] == []


def test_a_merchant_key_cannot_sign_in(api, open_console):
    console = open_console(api.url)
    console.open("/ops/sign-in")
    console.page.get_by_label("Ops API key").fill(api.key_a)
    console.page.get_by_role("button", name="Sign in").click()
    assert "merchant key" in console.text("[role=alert]")
    console.open("/ops/")
    assert "/ops/sign-in" in console.page.url
