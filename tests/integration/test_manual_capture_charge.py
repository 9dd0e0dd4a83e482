"""Manual capture, the charge's half: a successful confirm of a ``capture_method: manual``
payment ends the charge at ``requires_capture`` (a real database, the fake provider)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.harness.captures import ledger_by_account
from tests.harness.containers import build_container
from tests.harness.seeds import accept, ledger_sum, new_merchant, outbox_types, reload


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider)
    yield built
    built.close()


def test_a_manual_payment_stops_at_requires_capture_with_its_authorisation_booked(
    container, provider
):
    merchant = new_merchant(container)
    record = accept(container, merchant, "order-1", amount=1200, capture_method="manual")
    assert record.request.capture_method == "manual"

    result = process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)

    assert result is ProcessResult.COMPLETED
    paid = reload(container, record.id)
    assert paid.status is PaymentStatus.REQUIRES_CAPTURE
    assert paid.recovery_point is RecoveryPoint.COMPLETED
    assert (paid.lease_owner, paid.locked_until) == (None, None)  # the charge holds no lease
    assert (paid.amount_capturable, paid.amount_captured) == (1200, 0)
    assert paid.completed_at is None  # not final: a capture or a cancel ends it
    create = next(c for c in provider.calls if c.operation == "create")
    assert create.params == {"capture_method": "manual"}
    assert provider.captures == {}
    assert outbox_types(container, record.id) == ["payment.requires_capture"]
    assert ledger_by_account(container, record.id) == {
        "provider_authorized": 1200,
        "merchant_authorized": -1200,
    }
    assert ledger_sum(container, record.id) == 0
    shown = payment_representation(paid)
    assert (shown["status"], shown["capture_method"], shown["amount_capturable"]) == (
        "requires_capture",
        "manual",
        1200,
    )


def test_an_automatic_payment_shows_what_it_captured(container):
    merchant = new_merchant(container)
    record = accept(container, merchant, "order-1", amount=900)

    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)

    paid = reload(container, record.id)
    assert paid.status is PaymentStatus.SUCCEEDED
    assert paid.final_response is not None
    stored = json.loads(paid.final_response)
    assert stored["capture_method"] == "automatic"
    assert (stored["amount_capturable"], stored["amount_captured"], stored["amount_refunded"]) == (
        0,
        900,
        0,
    )
    assert ledger_by_account(container, record.id) == {
        "provider_receivable": 900,
        "merchant_payable": -900,
    }
