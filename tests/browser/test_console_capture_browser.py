"""Issue 11's console part in a real browser (Debian's Chromium): an operator captures a
manual-capture payment from its page (amount, reason), sees the audit row, and once the
capture ran sees the payment ``succeeded`` with the capture listed."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest

from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from tests.harness.captures import authorized_payment
from tests.integration.hardening_helpers import Api, running_api, sqlite_url
from tests.integration.webhook_helpers import client_of


@pytest.fixture
def api(tmp_path) -> Iterator[Api]:
    with running_api(sqlite_url(tmp_path)) as running:
        yield running


def test_an_operator_captures_a_manual_capture_payment_and_sees_it_succeed(
    api, open_console
) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "browser-capture", amount=2500)

    console = open_console(api.url)
    console.sign_in(api.ops_key)
    console.open(f"/ops/payments/{payment.id}")
    assert console.text("#payment-status") == "requires_capture"
    form = console.page.locator("#capture-form")
    form.get_by_label("amount to capture").fill("2000")
    form.get_by_label("reason").fill("merchant asked by phone (browser test)")
    form.get_by_role("button", name="Capture").click()
    console.page.wait_for_url(re.compile(f".*/ops/payments/{payment.id}\\?done=\\d+$"))
    done = console.text("#action-done")
    assert "capture" in done and "merchant asked by phone (browser test)" in done

    # The worker's part: the capture the form queued (the publisher recorded it).
    [(operation_id, token)] = [
        (op, t) for op, t in api.publisher.published if op.startswith("cap_")
    ]
    result = process_operation(
        api.container.runner(),
        operation_id,
        token,
        owner="browser-test-worker",
        sleep=lambda _s: None,
        rng=random.Random(1),
    )
    assert result is ProcessResult.COMPLETED
    console.wait_until(
        f"/ops/payments/{payment.id}",
        lambda: console.text("#payment-status") == "succeeded",
        what="the captured payment",
    )
    captures = console.text("#captures")
    assert operation_id in captures and "succeeded" in captures and "2000 usd" in captures
    assert console.page.locator("#capture-form").count() == 0
    assert "merchant asked by phone (browser test)" in console.text("#audit")
    assert console.foreign_requests == []
