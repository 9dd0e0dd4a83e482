"""Reconciliation's console pages in a real browser (Debian's Chromium), on PostgreSQL: an
Adyen account reconciled from the simulator's settlement report (decision 0106), with a
refund made in the Customer Area and never announced; an operator finds the run from the
menu, reads the finding with both sides, cannot mark it explained without a reason, then
marks it explained, and the page and the API say who and why."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.integration.adyen_simulator_helpers import API_KEY, Checkout, amount_body
from tests.integration.test_adyen_payments import Stack, adyen_stack
from tests.integration.test_adyen_reconciliation import paid, reconcile


@pytest.fixture
def stack(make_postgres_database) -> Iterator[Stack]:
    with adyen_stack(make_postgres_database(), api_keys=(API_KEY,), read_timeout=30.0) as built:
        yield built


def test_an_operator_reads_a_run_and_marks_its_finding_explained(
    stack: Stack, open_console
) -> None:
    ops = create_client(stack.container.uow, "night-shift", Role.OPS)
    payment = paid(stack, "browser-recon")
    adyen = Checkout(f"{stack.adyen.url}/v71")
    refund = adyen.modify(
        payment["provider_payment_id"], "refunds", amount_body(300, reference="ticket-12")
    )
    adyen.close()
    stack.adyen.admin.close_batch()
    run = reconcile(stack)
    console = open_console(stack.url)

    console.sign_in(ops.api_key)
    console.page.get_by_role("link", name="Reconciliation").click()
    console.page.wait_for_url("**/ops/reconciliation")
    listed = console.page.locator(f"#run-{run.id}")
    assert stack.account in listed.inner_text()
    listed.get_by_role("link", name=run.id).click()
    console.page.wait_for_url(f"**/ops/reconciliation/{run.id}")

    summary = console.text("#run-summary")
    assert f"{stack.account} (adyen)" in summary
    finding = console.page.locator("#run-findings tbody tr")
    assert finding.count() == 1
    cells = finding.locator("td").all_inner_texts()
    assert cells[0] == "refund_mismatch"
    assert cells[1] == refund["pspReference"]
    assert payment["id"] in cells[2]
    assert cells[3] == "none"  # payorch never heard of the refund
    assert cells[4] == "succeeded 300 eur"

    # The reason is required: the browser does not send the form without one.
    finding.get_by_role("button", name="Mark explained").click()
    assert finding.get_by_role("button", name="Mark explained").is_visible()
    assert console.page.url.endswith(f"/ops/reconciliation/{run.id}")

    finding.get_by_label("reason").fill("goodwill refund by support, ticket 12")
    finding.get_by_role("button", name="Mark explained").click()
    console.page.wait_for_url(re.compile(rf".*/ops/reconciliation/{run.id}\?done=\w+$"))

    assert "is marked explained (audited)" in console.text("#action-done")
    resolved = console.page.locator("#run-findings tbody tr td").last.inner_text()
    assert resolved == "resolved by night-shift: goodwill refund by support, ticket 12"
    with stack.client() as merchant:
        merchant.headers["Authorization"] = f"Bearer {ops.api_key}"
        shown = merchant.get(f"/v1/ops/reconciliation/runs/{run.id}").json()
    [explained] = shown["findings"]
    assert explained["resolution"]["status"] == "resolved"
    assert explained["resolution"]["by"] == "night-shift"
