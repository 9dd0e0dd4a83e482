"""The console's payment page shows the payment's refunds (over real HTTP, SQLite and
PostgreSQL): each refund with its status, amount, reason, provider id and lease, finished
and still processing alike."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import closing

import pytest

from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from tests.harness.refunds import request_refund, succeeded_payment
from tests.integration.console_helpers import signed_in
from tests.integration.hardening_helpers import Api, running_api
from tests.integration.webhook_helpers import client_of


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


def test_the_payment_page_lists_its_refunds_finished_and_processing(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = succeeded_payment(api.container, merchant, "order-1", amount=1500)
    done = request_refund(
        api.container, merchant, payment.id, "refund-1", amount=500, reason="duplicate"
    )
    result = process_operation(
        api.container.runner(),
        done.record.id,
        done.record.lease_token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(1),
    )
    assert result is ProcessResult.COMPLETED
    waiting = request_refund(api.container, merchant, payment.id, "refund-2", amount=300)
    untouched = succeeded_payment(api.container, merchant, "order-2", amount=700)
    [provider_refund] = api.provider.refunds_of(done.record.id)

    client, _token = signed_in(api)
    with closing(client):
        page = client.get(f"/ops/payments/{payment.id}")
        other = client.get(f"/ops/payments/{untouched.id}")

    assert page.status_code == 200
    section = page.text[page.text.index('id="refunds"') : page.text.index('id="events"')]
    assert section.count('class="refund-row"') == 2
    done_row = section[section.index(done.record.id) : section.index(waiting.record.id)]
    assert "succeeded" in done_row and "500 usd" in done_row and "duplicate" in done_row
    assert provider_refund.id in done_row
    waiting_row = section[section.index(waiting.record.id) :]
    assert "processing" in waiting_row and "300 usd" in waiting_row
    assert other.status_code == 200
    assert "No refund." in other.text
