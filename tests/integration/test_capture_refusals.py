"""A capture or cancel the provider refuses (an ordinary 4xx), as a service: a real database,
the scripted fake provider, no broker.

The decision (docs/decisions/0048-refused-capture-or-cancel.md): the operation ends
``failed`` with the provider's code and message; the intent is read after the refusal and
decides the payment (still ``requires_capture``: it stands; canceled at the provider:
``canceled``); the merchant gets ``payment.capture_failed`` / ``payment.cancel_failed`` in
the finish's transaction; no ledger line for what did not happen."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.captures import accept_cancel, accept_capture
from tests.fakes.provider import REFUSED_CODE, REFUSED_MESSAGE, FakeProvider
from tests.harness.captures import (
    authorized_payment,
    cancel_fingerprint,
    capture_fingerprint,
    ledger_by_account,
    outbox_of,
)
from tests.harness.containers import build_container
from tests.harness.refunds import reload_operation
from tests.harness.seeds import new_merchant, reload

AUTHORIZED = {"provider_authorized": 900, "merchant_authorized": -900}


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider, max_attempts=3, retry_base_seconds=0.1)
    yield built
    built.close()


def _run(container: Container, operation_id: str, token: int) -> ProcessResult:
    return process_operation(
        container.runner(),
        operation_id,
        token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(3),
    )


def _capture(container: Container, client, payment_id: str, key: str, amount: int | None = None):
    accepted = accept_capture(
        container.uow,
        container.publisher,
        container.settings,
        client,
        payment_id,
        key,
        amount,
        capture_fingerprint(payment_id, amount),
    )
    assert _run(container, accepted.record.id, accepted.record.lease_token) is (
        ProcessResult.COMPLETED
    )
    return reload_operation(container, accepted.record.id)


def _cancel(container: Container, client, payment_id: str, key: str):
    accepted = accept_cancel(
        container.uow,
        container.publisher,
        container.settings,
        client,
        payment_id,
        key,
        None,
        cancel_fingerprint(payment_id, None),
    )
    assert _run(container, accepted.record.id, accepted.record.lease_token) is (
        ProcessResult.COMPLETED
    )
    return reload_operation(container, accepted.record.id)


def test_a_refused_capture_fails_with_the_providers_reason_and_the_authorisation_stands(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=900)
    provider.fail("capture", 1, "refused")

    op = _capture(container, merchant, payment.id, "cap-1")

    assert (op.status, op.failure_code, op.failure_message) == (
        OperationStatus.FAILED,
        REFUSED_CODE,
        REFUSED_MESSAGE,
    )
    # Read after the refusal: still capturable, so the payment stands and nothing is booked.
    assert [c.operation for c in provider.calls[-2:]] == ["capture", "retrieve"]
    stood = reload(container, payment.id)
    assert stood.status is PaymentStatus.REQUIRES_CAPTURE and stood.amount_capturable == 900
    assert ledger_by_account(container, payment.id) == AUTHORIZED
    events = outbox_of(container, payment.id)
    assert [t for t, _ in events] == ["payment.requires_capture", "payment.capture_failed"]
    capture_failed = events[-1][1]
    assert capture_failed["id"] == op.id and capture_failed["object"] == "capture"
    assert capture_failed["status"] == "failed" and capture_failed["payment_id"] == payment.id
    assert capture_failed["failure"] == {"code": REFUSED_CODE, "message": REFUSED_MESSAGE}
    # The payment's answer moved with the event (its ETag changes).
    assert stood.latest_event_sequence == 2
    assert op.final_response is not None and b'"latest_event_sequence":2' in op.final_response

    # The merchant may capture again, with a new key.
    again = _capture(container, merchant, payment.id, "cap-2")
    assert again.status is OperationStatus.SUCCEEDED
    assert reload(container, payment.id).status is PaymentStatus.SUCCEEDED
    assert provider.captures == {payment.provider_payment_id: 1}


def test_a_refused_capture_of_an_authorisation_gone_at_the_provider_ends_the_payment_canceled(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=900)
    provider.fail("capture", 1, "refused")
    intent = provider.provider_payments[payment.provider_payment_id]
    intent.status, intent.cancellation_reason = "canceled", "automatic"

    op = _capture(container, merchant, payment.id, "cap-1")

    assert (op.status, op.failure_code) == (OperationStatus.FAILED, "authorization_canceled")
    canceled = reload(container, payment.id)
    assert canceled.status is PaymentStatus.CANCELED and canceled.amount_capturable == 0
    assert ledger_by_account(container, payment.id) == {
        "provider_authorized": 0,
        "merchant_authorized": 0,
    }
    assert [t for t, _ in outbox_of(container, payment.id)] == [
        "payment.requires_capture",
        "payment.capture_failed",
        "payment.canceled",
    ]
    assert provider.captures == {}


def test_a_refused_cancel_fails_with_the_providers_reason_and_the_payment_stands(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=900)
    provider.fail("cancel", 1, "refused")

    op = _cancel(container, merchant, payment.id, "cnl-1")

    assert (op.status, op.failure_code, op.failure_message) == (
        OperationStatus.FAILED,
        REFUSED_CODE,
        REFUSED_MESSAGE,
    )
    stood = reload(container, payment.id)
    assert stood.status is PaymentStatus.REQUIRES_CAPTURE and stood.amount_capturable == 900
    assert ledger_by_account(container, payment.id) == AUTHORIZED
    events = outbox_of(container, payment.id)
    assert [t for t, _ in events] == ["payment.requires_capture", "payment.cancel_failed"]
    assert events[-1][1]["object"] == "cancel"
    assert events[-1][1]["failure"] == {"code": REFUSED_CODE, "message": REFUSED_MESSAGE}
    assert provider.provider_payments[payment.provider_payment_id].status == "requires_capture"

    # Still the merchant's: a second cancel (new key) releases it.
    again = _cancel(container, merchant, payment.id, "cnl-2")
    assert again.status is OperationStatus.SUCCEEDED
    assert reload(container, payment.id).status is PaymentStatus.CANCELED
