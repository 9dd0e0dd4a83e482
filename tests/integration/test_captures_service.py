"""Capture and cancel on the engine, as a service: a real database, the scripted fake
provider, no broker.

Each test pins down one decision: the accept's guards (status, amount, one operation at a
time, nothing stored when refused), query first after an unknown outcome (never a second
capture or cancel), the finish (payment, ledger, outbox in one transaction), and the hold a
cancel puts on an unfinished charge (its worker fenced out, released if the cancel fails)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.captures import (
    AcceptedOperation,
    CaptureExceedsCapturable,
    OperationInProgress,
    PaymentStatusConflict,
    accept_cancel,
    accept_capture,
)
from orchestrator.services.idempotency import IdempotencyKeyReused
from tests.fakes.provider import FakeProvider
from tests.harness.captures import (
    authorized_payment,
    cancel_fingerprint,
    capture_fingerprint,
    ledger_by_account,
)
from tests.harness.containers import build_container
from tests.harness.refunds import operation_count, reload_operation, request_refund
from tests.harness.seeds import accept, ledger_sum, new_merchant, outbox_types, reload

SCA_CARD = "pm_card_threeDSecure2Required"
RETURN_URL = "https://shop.example/back"


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider, max_attempts=3, retry_base_seconds=0.1)
    yield built
    built.close()


def run(container: Container, operation_id: str, token: int) -> ProcessResult:
    return process_operation(
        container.runner(),
        operation_id,
        token,
        owner="test-worker",
        sleep=lambda _s: None,
        rng=random.Random(3),
    )


def capture(
    container: Container, client: ApiClient, payment_id: str, key: str, amount: int | None = None
) -> AcceptedOperation:
    return accept_capture(
        container.uow,
        container.publisher,
        container.settings,
        client,
        payment_id,
        key,
        amount,
        capture_fingerprint(payment_id, amount),
    )


def cancel(
    container: Container, client: ApiClient, payment_id: str, key: str, reason: str | None = None
) -> AcceptedOperation:
    return accept_cancel(
        container.uow,
        container.publisher,
        container.settings,
        client,
        payment_id,
        key,
        reason,
        cancel_fingerprint(payment_id, reason),
    )


def keys_of(provider: FakeProvider, operation: str) -> list[str | None]:
    return [c.key for c in provider.calls if c.operation == operation]


def test_a_capture_takes_the_whole_authorisation_once_and_books_it(container, provider):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=1000)
    accepted = capture(container, merchant, payment.id, "cap-1")
    assert accepted.record.id.startswith("cap_") and accepted.record.amount == 1000
    assert not accepted.replayed and b'"requires_capture"' in accepted.body

    assert run(container, accepted.record.id, accepted.record.lease_token) is (
        ProcessResult.COMPLETED
    )

    op = reload_operation(container, accepted.record.id)
    assert (op.status, op.recovery_point) == (OperationStatus.SUCCEEDED, RecoveryPoint.COMPLETED)
    paid = reload(container, payment.id)
    assert paid.status is PaymentStatus.SUCCEEDED and paid.completed_at is not None
    assert (paid.amount_captured, paid.amount_capturable) == (1000, 0)
    assert provider.captures == {paid.provider_payment_id: 1}
    assert keys_of(provider, "capture") == [f"payorch-{op.id}-capture-1"]
    assert ledger_by_account(container, payment.id) == {
        "provider_authorized": 0,
        "merchant_authorized": 0,
        "provider_receivable": 1000,
        "merchant_payable": -1000,
    }
    assert outbox_types(container, payment.id) == [
        "payment.requires_capture",
        "payment.captured",
        "payment.succeeded",
    ]
    # A replay of the finished capture answers with the payment as the finish left it.
    again = capture(container, merchant, payment.id, "cap-1")
    assert again.replayed and b'"succeeded"' in again.body


def test_the_ledger_equals_captured_and_refunded_after_a_partial_capture_and_a_refund(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=1000)
    accepted = capture(container, merchant, payment.id, "cap-1", amount=600)
    run(container, accepted.record.id, accepted.record.lease_token)
    refund = request_refund(container, merchant, payment.id, "r-1", amount=250)
    run(container, refund.record.id, refund.record.lease_token)

    paid = reload(container, payment.id)
    assert (paid.amount_captured, paid.amount_refunded, paid.amount_capturable) == (600, 250, 0)
    assert provider.provider_payments[paid.provider_payment_id].amount_received == 600
    with container.engine.connect() as conn:
        import sqlalchemy as sa

        from orchestrator.db.tables import ledger_lines

        payable = [
            int(r.amount)
            for r in conn.execute(
                sa.select(ledger_lines.c.amount).where(
                    ledger_lines.c.payment_id == payment.id,
                    ledger_lines.c.account.like("merchant_payable:%"),
                )
            )
        ]
    # What the merchant was credited is what was captured; what it gave back was refunded.
    assert -sum(a for a in payable if a < 0) == paid.amount_captured
    assert sum(a for a in payable if a > 0) == paid.amount_refunded
    totals = ledger_by_account(container, payment.id)
    assert totals["merchant_payable"] == -(paid.amount_captured - paid.amount_refunded)
    assert totals["provider_authorized"] == totals["merchant_authorized"] == 0
    assert ledger_sum(container, payment.id) == 0


def test_a_capture_timing_out_after_the_provider_captured_is_read_first_and_never_sent_twice(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=800)
    provider.fail("capture", 1, "unknown_after_effect")
    accepted = capture(container, merchant, payment.id, "cap-1")

    assert run(container, accepted.record.id, accepted.record.lease_token) is (
        ProcessResult.COMPLETED
    )

    paid = reload(container, payment.id)
    assert paid.status is PaymentStatus.SUCCEEDED and paid.amount_captured == 800
    assert provider.captures == {paid.provider_payment_id: 1}
    assert [c.operation for c in provider.calls if c.operation in ("capture", "retrieve")][-2:] == [
        "capture",
        "retrieve",
    ]
    assert reload_operation(container, accepted.record.id).unknown_outcomes == 1


def test_a_capture_timing_out_before_the_effect_is_read_then_sent_under_the_next_key(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=800)
    provider.fail("capture", 1, "unknown_before_effect")
    accepted = capture(container, merchant, payment.id, "cap-1")

    run(container, accepted.record.id, accepted.record.lease_token)

    op_id = accepted.record.id
    assert keys_of(provider, "capture") == [
        f"payorch-{op_id}-capture-1",
        f"payorch-{op_id}-capture-2",
    ]
    paid = reload(container, payment.id)
    assert provider.captures == {paid.provider_payment_id: 1}
    assert paid.status is PaymentStatus.SUCCEEDED


def test_a_capture_is_refused_with_nothing_stored_over_the_capturable_amount_or_status(
    container,
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=500)
    with pytest.raises(CaptureExceedsCapturable) as over:
        capture(container, merchant, payment.id, "cap-1", amount=501)
    assert over.value.capturable == 500

    automatic = accept(container, merchant, "order-2")
    process_payment(container.runner(), automatic.id, automatic.lease_token, sleep=lambda _s: 0)
    with pytest.raises(PaymentStatusConflict) as refused:
        capture(container, merchant, automatic.id, "cap-2")
    assert refused.value.shown_status == "succeeded"
    assert operation_count(container, payment.id) == operation_count(container, automatic.id) == 0


def test_no_capture_or_cancel_starts_while_another_of_the_same_payment_is_unfinished(
    container,
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1")
    first = capture(container, merchant, payment.id, "cap-1", amount=100)

    with pytest.raises(OperationInProgress) as busy:
        capture(container, merchant, payment.id, "cap-2")
    assert busy.value.operation_id == first.record.id
    with pytest.raises(OperationInProgress):
        cancel(container, merchant, payment.id, "cnl-1")
    assert operation_count(container, payment.id) == 1


def test_a_replayed_key_answers_the_same_capture_and_another_body_under_it_is_a_reuse(
    container,
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1")
    first = capture(container, merchant, payment.id, "cap-1", amount=300)

    again = capture(container, merchant, payment.id, "cap-1", amount=300)
    with pytest.raises(IdempotencyKeyReused):
        capture(container, merchant, payment.id, "cap-1", amount=200)

    assert again.replayed and again.record.id == first.record.id
    assert again.body == first.body
    assert operation_count(container, payment.id) == 1


def test_a_cancel_releases_the_authorisation_once(container, provider):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=700)
    provider.fail("cancel", 1, "unknown_after_effect")
    accepted = cancel(container, merchant, payment.id, "cnl-1", reason="requested_by_customer")
    assert accepted.record.id.startswith("cnl_")

    assert run(container, accepted.record.id, accepted.record.lease_token) is (
        ProcessResult.COMPLETED
    )

    paid = reload(container, payment.id)
    assert paid.status is PaymentStatus.CANCELED and paid.amount_capturable == 0
    assert paid.failure is not None and paid.failure.code == "canceled"
    intent = provider.provider_payments[paid.provider_payment_id]
    assert (intent.status, intent.cancellation_reason) == ("canceled", "requested_by_customer")
    # Timed out after the effect: read first, never canceled a second time.
    assert keys_of(provider, "cancel") == [f"payorch-{accepted.record.id}-cancel-1"]
    assert ledger_by_account(container, payment.id) == {
        "provider_authorized": 0,
        "merchant_authorized": 0,
    }
    assert outbox_types(container, payment.id)[-1] == "payment.canceled"
    with pytest.raises(PaymentStatusConflict):
        capture(container, merchant, payment.id, "cap-1")


def test_a_cancel_while_the_customer_authenticates_holds_the_charge_and_cancels_it(
    container, provider
):
    merchant = new_merchant(container)
    record = accept(
        container,
        merchant,
        "order-1",
        payment_method=SCA_CARD,
        off_session=False,
        return_url=RETURN_URL,
    )
    assert process_payment(
        container.runner(), record.id, record.lease_token, sleep=lambda _s: 0
    ) is (ProcessResult.WAITING)
    waiting = reload(container, record.id)
    assert waiting.requires_action

    accepted = cancel(container, merchant, record.id, "cnl-1")
    held = reload(container, record.id)
    assert held.lease_token == waiting.lease_token + 1
    assert held.lease_owner == f"operation:{accepted.record.id}"
    # The charge's worker, woken with the token it had, is fenced out.
    assert (
        process_payment(container.runner(), record.id, waiting.lease_token, sleep=lambda _s: 0)
        is ProcessResult.NOT_CLAIMED
    )

    run(container, accepted.record.id, accepted.record.lease_token)

    canceled = reload(container, record.id)
    assert (canceled.status, canceled.recovery_point) == (
        PaymentStatus.CANCELED,
        RecoveryPoint.COMPLETED,
    )
    assert (canceled.lease_owner, canceled.waiting_for, canceled.next_action) == (None, None, None)
    assert provider.provider_payments[canceled.provider_payment_id].status == "canceled"
    assert provider.charges == {}
    assert outbox_types(container, record.id) == ["payment.requires_action", "payment.canceled"]


def test_a_cancel_that_loses_the_race_to_the_customer_fails_and_the_charge_finishes(
    container, provider
):
    merchant = new_merchant(container)
    record = accept(
        container,
        merchant,
        "order-1",
        payment_method=SCA_CARD,
        off_session=False,
        return_url=RETURN_URL,
    )
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)
    accepted = cancel(container, merchant, record.id, "cnl-1")
    provider_payment_id = reload(container, record.id).provider_payment_id
    provider.authenticate(
        provider_payment_id
    )  # the customer authenticated just before: money moved

    run(container, accepted.record.id, accepted.record.lease_token)

    op = reload_operation(container, accepted.record.id)
    assert (op.status, op.failure_code) == (OperationStatus.FAILED, "payment_already_succeeded")
    # The held charge is due again: the sweeper hands it back and it finishes the payment.
    container.publisher.published.clear()
    report = container.sweeper().run_once()
    assert report.due_retries == [record.id]
    ((payment_id, token),) = container.publisher.published
    process_payment(container.runner(), payment_id, token, sleep=lambda _s: 0)
    paid = reload(container, record.id)
    assert paid.status is PaymentStatus.SUCCEEDED and paid.amount_captured == 1000
    assert provider.charges == {provider_payment_id: 1}


def test_a_cancel_before_the_charge_ran_fences_it_and_nothing_is_sent(container, provider):
    merchant = new_merchant(container)
    record = accept(container, merchant, "order-1")  # its task not run yet

    accepted = cancel(container, merchant, record.id, "cnl-1")
    assert (
        process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)
        is ProcessResult.NOT_CLAIMED
    )
    run(container, accepted.record.id, accepted.record.lease_token)

    canceled = reload(container, record.id)
    assert canceled.status is PaymentStatus.CANCELED
    assert provider.calls == []  # no intent was created, nothing to cancel at the provider
    assert ledger_sum(container, record.id) == 0


def test_a_cancel_after_money_may_have_moved_is_409(container, provider):
    merchant = new_merchant(container)
    record = accept(container, merchant, "order-1", payment_method="pm_card_sim_processingSucceeds")
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: 0)
    assert reload(container, record.id).confirm_attempts == 1

    with pytest.raises(PaymentStatusConflict) as refused:
        cancel(container, merchant, record.id, "cnl-1")
    assert refused.value.shown_status == "processing"

    done = accept(container, merchant, "order-2")
    process_payment(container.runner(), done.id, done.lease_token, sleep=lambda _s: 0)
    with pytest.raises(PaymentStatusConflict):
        cancel(container, merchant, done.id, "cnl-2")
    assert operation_count(container, record.id) == operation_count(container, done.id) == 0


def test_the_database_refuses_a_second_unfinished_capture_even_without_the_lock(container):
    import sqlalchemy as sa

    from orchestrator.db.tables import operations

    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1")
    first = capture(container, merchant, payment.id, "cap-1").record
    with container.engine.connect() as conn:
        row = dict(
            conn.execute(sa.select(operations).where(operations.c.id == first.id)).one()._mapping
        )
    row.update(id="cnl_" + "0" * 32, kind="cancel", idempotency_key="cnl-raw")

    with pytest.raises(sa.exc.IntegrityError), container.engine.begin() as conn:
        conn.execute(operations.insert().values(**row))  # a writer that skipped the lock

    assert operation_count(container, payment.id) == 1


def _queue_check(container: Container, payment_id: str):
    from orchestrator.services.captures import request_authorization_check

    with container.uow() as uow:
        queued = request_authorization_check(uow, payment_id, now=uow.now())
        uow.commit()
    return queued


def _sweep_and_run(container: Container) -> None:
    container.publisher.published.clear()
    container.sweeper().run_once()
    for operation_id, token in list(container.publisher.published):
        run(container, operation_id, token)


def test_an_authorisation_the_provider_expired_is_read_and_the_payment_ends_canceled(
    container, provider
):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=900)
    intent = provider.provider_payments[payment.provider_payment_id]
    intent.status, intent.cancellation_reason = "canceled", "automatic"  # 7 days later

    queued = _queue_check(container, payment.id)
    assert queued is not None and queued.origin == "provider" and queued.idempotency_key is None
    assert _queue_check(container, payment.id) is None  # one check in flight at a time
    _sweep_and_run(container)

    canceled = reload(container, payment.id)
    assert canceled.status is PaymentStatus.CANCELED and canceled.amount_capturable == 0
    assert canceled.failure is not None and "provider canceled" in canceled.failure.message
    assert keys_of(provider, "cancel") == []  # read, never sent
    assert ledger_by_account(container, payment.id) == {
        "provider_authorized": 0,
        "merchant_authorized": 0,
    }
    assert outbox_types(container, payment.id)[-1] == "payment.canceled"


def test_a_stale_cancel_event_changes_nothing_and_sends_nothing(container, provider):
    merchant = new_merchant(container)
    payment = authorized_payment(container, merchant, "order-1", amount=900)

    queued = _queue_check(container, payment.id)
    assert queued is not None
    _sweep_and_run(container)

    check = reload_operation(container, queued.id)
    assert (check.status, check.failure_code) == (
        OperationStatus.FAILED,
        "not_canceled_at_provider",
    )
    assert reload(container, payment.id).status is PaymentStatus.REQUIRES_CAPTURE
    assert keys_of(provider, "cancel") == []
    # The authorisation is still the merchant's to capture.
    accepted = capture(container, merchant, payment.id, "cap-1")
    run(container, accepted.record.id, accepted.record.lease_token)
    assert reload(container, payment.id).status is PaymentStatus.SUCCEEDED
