"""Refunds made outside payorch (the provider's dashboard), recorded by the refund sync, as a
service: a real database (SQLite and PostgreSQL), the fake provider, no broker.

Each test pins one decision: a foreign refund is recorded once with origin provider, in the
money, the ledger and the outbox; a payorch refund in flight is never taken for a foreign
one; the refund limit holds against payorch refunds not yet at the provider; a pending one
waits and is settled by the refund kind; a burst of hints queues one sync."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import replace

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.operations import OperationKindName, OperationRecord, OperationStatus
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.base import ProviderRefund
from orchestrator.services.refund_sync import request_refund_sync
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.refunds import (
    force_operation,
    reload_operation,
    request_refund,
    succeeded_payment,
)
from tests.harness.seeds import force, ledger_sum, new_merchant, outbox_types, reload
from tests.integration.lease_helpers import cli_environment, run_payorch, run_payorch_json

_dashboard_ids = itertools.count(1)


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


def dashboard_refund(
    provider: FakeProvider, provider_payment_id: str, amount: int, status: str = "succeeded"
) -> ProviderRefund:
    """A refund made in the provider's dashboard: no metadata of ours, no key of ours."""
    refund = ProviderRefund(
        id=f"re_dashboard{next(_dashboard_ids)}",
        provider_payment_id=provider_payment_id,
        amount=amount,
        currency="usd",
        status=status,
        metadata={},
        reason="requested_by_customer",
        created=1_700_000_000 + len(provider.refunds),
    )
    provider.refunds[refund.id] = refund
    return refund


def sync(container: Container, payment_id: str, reason: str = "test") -> OperationRecord:
    with container.uow() as uow:
        record, _ = request_refund_sync(uow, payment_id, reason=reason, now=uow.now())
        uow.commit()
    return record


def run_sync(container: Container, payment_id: str) -> tuple[OperationRecord, ProcessResult]:
    record = sync(container, payment_id)
    return record, run(container, record.id, record.lease_token)


def refunds_of(container: Container, payment_id: str) -> list[OperationRecord]:
    with container.uow(read_only=True) as uow:
        return uow.operations.list_for_payment(payment_id, OperationKindName.REFUND)


def test_a_dashboard_refund_is_recorded_once_in_the_money_the_ledger_and_the_outbox(
    container, provider
):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1500)
    assert payment.provider_payment_id is not None
    foreign = dashboard_refund(provider, payment.provider_payment_id, 600)

    record, result = run_sync(container, payment.id)

    assert result is ProcessResult.COMPLETED
    assert reload_operation(container, record.id).status is OperationStatus.SUCCEEDED
    [refund] = refunds_of(container, payment.id)
    assert (refund.origin, refund.status, refund.amount) == (
        "provider",
        OperationStatus.SUCCEEDED,
        600,
    )
    assert refund.provider_object_id == foreign.id
    assert refund.idempotency_key is None and refund.final_response is not None
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (600, 600)
    assert ledger_sum(container, payment.id) == 0
    assert outbox_types(container, payment.id) == ["payment.succeeded", "refund.succeeded"]

    # The same hint again (a duplicate or late event): nothing changes twice.
    _, again = run_sync(container, payment.id)
    assert again is ProcessResult.COMPLETED
    assert len(refunds_of(container, payment.id)) == 1
    assert reload(container, payment.id).amount_refunded == 600
    assert outbox_types(container, payment.id) == ["payment.succeeded", "refund.succeeded"]
    # What is left is what payorch may still refund.
    rest = request_refund(container, merchant, payment.id, "rest")
    assert rest.record.amount == 900


def test_a_payorch_refund_in_flight_is_not_taken_for_a_foreign_one(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    assert payment.provider_payment_id is not None
    ours = request_refund(container, merchant, payment.id, "ours", amount=300).record
    # Created at the provider, but payorch has not recorded its provider id yet (the worker
    # died after the call): only its metadata names it.
    provider.create_refund(
        provider_payment_id=payment.provider_payment_id,
        operation_id=ours.id,
        attempt=1,
        amount=300,
        reason=None,
        metadata={"payorch_refund_id": ours.id},
    )
    dashboard_refund(provider, payment.provider_payment_id, 200)

    _, result = run_sync(container, payment.id)

    assert result is ProcessResult.COMPLETED
    by_origin = {r.origin: r for r in refunds_of(container, payment.id)}
    assert set(by_origin) == {"payorch", "provider"}
    assert by_origin["payorch"].id == ours.id and by_origin["payorch"].provider_object_id is None
    assert by_origin["provider"].amount == 200
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (200, 500)


def test_room_held_by_payorch_refunds_not_yet_at_the_provider_defers_the_sync(container, provider):
    """The refund limit under concurrency: the dashboard took what a payorch refund had
    reserved; that refund will be refused by the provider, and only then does the foreign
    one fit.  Reserved never exceeds captured meanwhile."""
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    assert payment.provider_payment_id is not None
    ours = request_refund(container, merchant, payment.id, "ours", amount=600).record
    dashboard_refund(provider, payment.provider_payment_id, 800)

    record, result = run_sync(container, payment.id)

    assert result is ProcessResult.DEFERRED
    assert refunds_of(container, payment.id) == [reload_operation(container, ours.id)]
    paid = reload(container, payment.id)
    assert paid.amount_refund_reserved == 600 <= paid.amount_captured

    # The payorch refund reaches the provider, which refuses it (only 200 left there).
    assert run(container, ours.id, ours.lease_token) is ProcessResult.COMPLETED
    assert reload_operation(container, ours.id).status is OperationStatus.FAILED
    assert reload(container, payment.id).amount_refund_reserved == 0

    deferred = force_operation(container, record.id, next_attempt_at=None)
    assert run(container, record.id, deferred.lease_token) is ProcessResult.COMPLETED
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (800, 800)
    assert ledger_sum(container, payment.id) == 0


def test_a_pending_dashboard_refund_waits_and_the_refund_kind_settles_it(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    assert payment.provider_payment_id is not None
    foreign = dashboard_refund(provider, payment.provider_payment_id, 400, status="pending")

    _, result = run_sync(container, payment.id)

    assert result is ProcessResult.COMPLETED
    [waiting] = refunds_of(container, payment.id)
    assert (waiting.origin, waiting.status) == ("provider", OperationStatus.PROCESSING)
    assert waiting.lease_owner is None and waiting.next_attempt_at is not None
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (0, 400)
    assert outbox_types(container, payment.id) == ["payment.succeeded"]

    # The provider settles it; the next hint wakes the waiting row, which reads it by id.
    provider.refunds[foreign.id] = replace(foreign, status="succeeded")
    run_sync(container, payment.id)
    woken = reload_operation(container, waiting.id)
    assert woken.next_attempt_at is not None and waiting.next_attempt_at is not None
    assert woken.next_attempt_at < waiting.next_attempt_at  # due now, not at its re-check
    assert run(container, waiting.id, woken.lease_token) is ProcessResult.COMPLETED

    settled = reload_operation(container, waiting.id)
    assert settled.status is OperationStatus.SUCCEEDED
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (400, 400)
    assert ledger_sum(container, payment.id) == 0
    assert outbox_types(container, payment.id) == ["payment.succeeded", "refund.succeeded"]


def test_a_failed_dashboard_refund_is_listed_and_moves_no_money(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    assert payment.provider_payment_id is not None
    dashboard_refund(provider, payment.provider_payment_id, 400, status="failed")

    run_sync(container, payment.id)

    [refund] = refunds_of(container, payment.id)
    assert (refund.origin, refund.status) == ("provider", OperationStatus.FAILED)
    paid = reload(container, payment.id)
    assert (paid.amount_refunded, paid.amount_refund_reserved) == (0, 0)
    assert outbox_types(container, payment.id) == ["payment.succeeded", "refund.failed"]


def test_hints_before_the_sync_is_claimed_queue_one_sync(container):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)

    first = sync(container, payment.id, "charge.refunded evt_1")
    second = sync(container, payment.id, "refund.created evt_2")

    assert first.id == second.id
    assert first.id.startswith("rsy_")
    assert run(container, first.id, first.lease_token) is ProcessResult.COMPLETED
    # Claimed and finished: the next hint queues a new one.
    assert sync(container, payment.id, "refund.updated evt_3").id != first.id


def test_an_operator_reconciles_a_refund_whose_event_was_lost(
    make_postgres_database, broker_url
) -> None:
    """No event arrived (dropped): ``payorch payments sync-refunds`` queues the sync, audited,
    and the sweeper's dispatch (here: the worker's run) records the refund."""
    provider = FakeProvider()
    database_url = make_postgres_database()
    container = build_container(database_url, provider=provider)
    try:
        merchant = new_merchant(container)
        payment = succeeded_payment(container, merchant, "order-1", amount=1000)
        assert payment.provider_payment_id is not None
        dashboard_refund(provider, payment.provider_payment_id, 250)
        env = cli_environment(database_url, broker_url)

        queued = run_payorch_json(
            "payments", "sync-refunds", payment.id, "--reason", "event lost", env=env
        )
        again = run_payorch_json(
            "payments", "sync-refunds", payment.id, "--reason", "twice", env=env
        )

        assert queued["id"].startswith("rsy_") and queued["queued"] is True
        assert again["id"] == queued["id"] and again["queued"] is False  # one sync queued
        with container.uow(read_only=True) as uow:
            actions = [a.action for a in uow.audit.list(payment_id=payment.id)]
        assert actions.count("sync_refunds") == 2
        sync_row = reload_operation(container, queued["id"])
        assert run(container, sync_row.id, sync_row.lease_token) is ProcessResult.COMPLETED
        [refund] = refunds_of(container, payment.id)
        assert (refund.origin, refund.amount) == ("provider", 250)
        missing = run_payorch(
            "payments", "sync-refunds", "pay_" + "0" * 32, "--reason", "x", env=env
        )
        assert missing.returncode != 0
    finally:
        container.close()


def test_a_sync_of_a_payment_with_nothing_captured_records_nothing(container, provider):
    merchant = new_merchant(container)
    payment = succeeded_payment(container, merchant, "order-1", amount=1000)
    assert payment.provider_payment_id is not None
    dashboard_refund(provider, payment.provider_payment_id, 1000)
    force(container, payment.id, status="canceled")

    record, result = run_sync(container, payment.id)

    assert result is ProcessResult.COMPLETED
    assert reload_operation(container, record.id).status is OperationStatus.SUCCEEDED
    assert refunds_of(container, payment.id) == []
    assert reload(container, payment.id).amount_refunded == 0
    assert not [c for c in provider.calls if c.operation == "list_refunds"]
