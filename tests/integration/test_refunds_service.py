"""Refunds on the engine, as a service: a real database, a scripted fake provider, no broker.

Each test pins down one decision: the accept's reservation (nothing stored when refused),
query-first after an unknown outcome (never a second refund), the finish (money, ledger,
outbox in one transaction), and the fence (a taken-over holder writes nothing)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.operations import OperationStatus
from orchestrator.domain.states import RecoveryPoint
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.idempotency import IdempotencyKeyReused
from orchestrator.services.refunds import PaymentNotRefundable, RefundExceedsCaptured
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.refunds import (
    force_operation,
    operation_count,
    reload_operation,
    request_refund,
    succeeded_payment,
)
from tests.harness.seeds import accept, ledger_sum, new_merchant, outbox_types, reload


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


def test_a_full_refund_returns_the_money_once_and_books_it(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1500)
    accepted = request_refund(container, merchant, payment.id, "refund-1", reason="duplicate")
    assert accepted.record.amount == 1500  # defaults to what is left
    assert accepted.record.id.startswith("rfd_")

    assert (
        run(container, accepted.record.id, accepted.record.lease_token) is ProcessResult.COMPLETED
    )

    refund = reload_operation(container, accepted.record.id)
    assert refund.status is OperationStatus.SUCCEEDED
    assert refund.recovery_point is RecoveryPoint.COMPLETED
    assert [r.amount for r in provider.refunds_of(refund.id)] == [1500]
    assert refund.provider_object_id == provider.refunds_of(refund.id)[0].id
    paid = reload(container, payment.id)
    assert (paid.amount_captured, paid.amount_refunded, paid.amount_refund_reserved) == (
        1500,
        1500,
        1500,
    )
    assert ledger_sum(container, payment.id) == 0
    assert "refund.succeeded" in outbox_types(container, payment.id)
    assert [c.key for c in provider.calls if c.operation == "refund"] == [
        f"payorch-{refund.id}-refund-1"
    ]


def test_partial_refunds_fit_and_one_over_what_is_left_is_refused_with_nothing_stored(
    container,
):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    request_refund(container, merchant, payment.id, "r-1", amount=400)
    request_refund(container, merchant, payment.id, "r-2", amount=500)

    with pytest.raises(RefundExceedsCaptured) as refused:
        request_refund(container, merchant, payment.id, "r-3", amount=200)

    assert refused.value.left == 100
    assert operation_count(container, payment.id) == 2
    assert reload(container, payment.id).amount_refund_reserved == 900
    # What is left still fits, and no amount means all of it.
    assert request_refund(container, merchant, payment.id, "r-4").record.amount == 100


def test_a_payment_that_has_not_succeeded_is_not_refundable(container):
    merchant = new_merchant(container)
    payment = accept(container, merchant, "order-1")  # still processing

    with pytest.raises(PaymentNotRefundable):
        request_refund(container, merchant, payment.id, "r-1")

    assert operation_count(container, payment.id) == 0


def test_a_replayed_key_answers_the_same_refund_and_another_body_under_it_is_a_reuse(
    container,
):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    first = request_refund(container, merchant, payment.id, "r-1", amount=1000)

    again = request_refund(container, merchant, payment.id, "r-1", amount=1000)
    with pytest.raises(IdempotencyKeyReused):
        request_refund(container, merchant, payment.id, "r-1", amount=10)

    assert again.replayed and again.record.id == first.record.id
    assert again.record.accepted_response == first.record.accepted_response
    assert operation_count(container, payment.id) == 1


def test_a_refund_timing_out_after_the_effect_is_found_by_the_lookup_and_never_sent_twice(
    container, provider
):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    provider.fail("refund", 1, "unknown_after_effect")
    accepted = request_refund(container, merchant, payment.id, "r-1", amount=600)

    assert (
        run(container, accepted.record.id, accepted.record.lease_token) is ProcessResult.COMPLETED
    )

    refund = reload_operation(container, accepted.record.id)
    assert refund.status is OperationStatus.SUCCEEDED
    assert len(provider.refunds_of(refund.id)) == 1
    assert [c.operation for c in provider.calls if "refund" in c.operation] == [
        "refund",
        "list_refunds",
    ]
    assert reload(container, payment.id).amount_refunded == 600


def test_a_refund_timing_out_before_the_effect_is_looked_up_then_resent_under_the_same_key(
    container, provider
):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    provider.fail("refund", 1, "unknown_before_effect")
    accepted = request_refund(container, merchant, payment.id, "r-1", amount=1000)

    run(container, accepted.record.id, accepted.record.lease_token)

    refund = reload_operation(container, accepted.record.id)
    assert refund.status is OperationStatus.SUCCEEDED
    assert len(provider.refunds_of(refund.id)) == 1
    keys = [c.key for c in provider.calls if c.operation == "refund"]
    assert keys == [f"payorch-{refund.id}-refund-1"] * 2


def test_a_refund_the_provider_refuses_fails_and_frees_what_it_held(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    accepted = request_refund(container, merchant, payment.id, "r-1", amount=700)
    # Someone refunded at the provider directly (the Dashboard): ours no longer fits there.
    provider_payment_id = reload(container, payment.id).provider_payment_id
    provider.create_refund(
        provider_payment_id=provider_payment_id,
        operation_id="outside",
        attempt=1,
        amount=500,
        reason=None,
        metadata={},
    )

    run(container, accepted.record.id, accepted.record.lease_token)

    refund = reload_operation(container, accepted.record.id)
    assert refund.status is OperationStatus.FAILED
    assert refund.failure_code == "amount_too_large"
    paid = reload(container, payment.id)
    assert (paid.amount_refund_reserved, paid.amount_refunded) == (0, 0)
    assert ledger_sum(container, payment.id) == 0
    assert "refund.failed" in outbox_types(container, payment.id)


def test_a_refund_holder_taken_over_by_the_sweeper_is_fenced_out_of_its_finish(container):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    accepted = request_refund(container, merchant, payment.id, "r-1", amount=300)
    with container.uow() as uow:
        now = uow.now()
        holder = uow.operations.claim(
            accepted.record.id,
            carried_token=accepted.record.lease_token,
            owner="stalled-worker",
            now=now,
            lease_until=now + timedelta(seconds=60),
        )
        uow.commit()
    assert holder is not None
    # The stalled holder's lease runs out; the sweeper takes the refund over.
    force_operation(container, holder.id, locked_until=now - timedelta(seconds=1))
    report = container.sweeper().run_once()
    assert report.taken_over == [holder.id]
    new_token = reload_operation(container, holder.id).lease_token
    assert container.publisher.published[-1] == (holder.id, new_token)

    with container.uow() as uow:
        stale = uow.operations.record_settlement(
            holder.id,
            token=holder.lease_token,
            outcome=OperationStatus.SUCCEEDED,
            provider_object_id="re_stale",
            failure_code=None,
            failure_message=None,
            now=uow.now(),
        )
    assert stale is None  # fenced

    assert run(container, holder.id, new_token) is ProcessResult.COMPLETED
    assert reload_operation(container, holder.id).status is OperationStatus.SUCCEEDED


def test_the_operators_payment_page_lists_the_refund_with_its_lease_and_history(container):
    from orchestrator.ops.payment_documents import payment_detail_representation
    from orchestrator.ops.payment_reads import get_payment_detail

    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    accepted = request_refund(container, merchant, payment.id, "r-1", amount=250)
    run(container, accepted.record.id, accepted.record.lease_token)

    detail = get_payment_detail(container.read_only_uow, payment.id)
    assert detail is not None
    page = payment_detail_representation(detail)

    charge, refund = page["operations"]
    assert charge["kind"] == "charge"
    assert (refund["kind"], refund["operation_id"], refund["status"]) == (
        "refund",
        accepted.record.id,
        "succeeded",
    )
    assert refund["amount"] == 250 and refund["provider_object_id"].startswith("re_")
    refund_history = [e for e in detail.lease_events if e.operation_id == accepted.record.id]
    assert [e.event for e in refund_history] == ["claim", "finish"]
