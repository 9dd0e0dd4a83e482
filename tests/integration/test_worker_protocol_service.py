"""The worker protocol as a service, on a real database, with a scripted fake provider.

These pin down each decision of the protocol (query first, fencing, recovery points)
without a broker; tests/integration/test_worker_end_to_end.py runs the same protocol in
real worker processes against the simulator.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import psycopg._queries as psycopg_queries  # the cache's seam: private, pinned here
import pytest

from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.providers.base import ProviderPayment
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import (
    accept,
    count_rows,
    force,
    ledger_sum,
    new_merchant,
    outbox_types,
    outcome_rows,
    reload,
)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(
        database_url,
        provider=provider,
        max_attempts=3,
        retry_base_seconds=0.1,
        retry_cap_seconds=1.0,
    )
    yield built
    built.close()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def create_payment_at_provider(provider: FakeProvider, record: PaymentRecord) -> ProviderPayment:
    """What a predecessor worker did at the provider before it died."""
    return provider.create_payment(
        record_id=record.id,
        amount=record.request.amount,
        currency=record.request.currency,
        payment_method=record.request.payment_method,
        description=None,
        metadata={},
    )


def run(container: Container, payment_id: str, token: int, sleeps: Sleeps) -> ProcessResult:
    return process_payment(
        container.runner(),
        payment_id,
        token,
        owner="test-worker",
        sleep=sleeps,
        rng=random.Random(7),
    )


def test_happy_path_charges_once_and_writes_balanced_business_rows(container, provider, sleeps):
    record = accept(container, new_merchant(container), "order-1", amount=2500)

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert done.recovery_point is RecoveryPoint.COMPLETED
    assert done.lease_owner is None and done.locked_until is None
    assert done.provider_payment_id is not None
    assert done.response_body is not None and done.response_body["status"] == "succeeded"
    assert provider.movements(record.id) == 1
    assert outcome_rows(container, record.id) == 1
    assert count_rows(container, ledger_lines, record.id) == 2
    assert ledger_sum(container, record.id) == 0
    assert outbox_types(container, record.id) == ["payment.succeeded"]
    assert [c.operation for c in provider.calls] == ["create", "confirm"]
    assert provider.calls[0].key == f"payorch-{record.id}-create"
    assert provider.calls[1].key == f"payorch-{record.id}-confirm-1"


def test_decline_is_a_final_failure_with_the_providers_codes(container, provider, sleeps):
    record = accept(
        container, new_merchant(container), "order-2", payment_method="pm_card_chargeDeclined"
    )

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    done = reload(container, record.id)
    assert done.status is PaymentStatus.FAILED
    assert done.failure is not None
    assert (done.failure.code, done.failure.decline_code) == ("card_declined", "generic_decline")
    assert provider.movements(record.id) == 0
    assert outcome_rows(container, record.id) == 1
    assert count_rows(container, ledger_lines, record.id) == 0
    assert outbox_types(container, record.id) == ["payment.failed"]


def test_a_confirm_that_timed_out_after_the_effect_is_queried_not_resent(
    container, provider, sleeps
):
    provider.fail("confirm", 1, "unknown_after_effect")
    record = accept(container, new_merchant(container), "order-3")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    operations = [c.operation for c in provider.calls]
    assert operations == ["create", "confirm", "retrieve"]
    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
    assert provider.movements(record.id) == 1


def test_a_saved_500_is_not_replayed_in_a_loop(container, provider, sleeps):
    provider.fail("confirm", 1, "saved_500_after_effect")
    record = accept(container, new_merchant(container), "order-4")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    assert [c.operation for c in provider.calls] == ["create", "confirm", "retrieve"]
    assert provider.movements(record.id) == 1
    assert reload(container, record.id).unknown_outcomes == 1


def test_a_confirm_that_failed_before_the_effect_is_retried_with_a_new_key_after_a_query(
    container, provider, sleeps
):
    provider.fail("confirm", 1, "unknown_before_effect")
    record = accept(container, new_merchant(container), "order-5")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    assert [c.operation for c in provider.calls] == ["create", "confirm", "retrieve", "confirm"]
    assert provider.calls[3].key == f"payorch-{record.id}-confirm-2"
    assert len(sleeps.delays) == 1  # backoff between the unknown outcome and the query
    assert provider.movements(record.id) == 1


def test_rate_limiting_waits_at_least_retry_after(container, provider, sleeps):
    provider.retry_after = 0.75
    provider.fail("confirm", 1, "rate_limited")
    record = accept(container, new_merchant(container), "order-6")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    assert sleeps.delays and sleeps.delays[0] >= 0.75
    assert provider.movements(record.id) == 1


def test_key_in_use_waits_then_queries_before_confirming_again(container, provider, sleeps):
    provider.fail("confirm", 1, "key_in_use")
    record = accept(container, new_merchant(container), "order-7")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    assert [c.operation for c in provider.calls] == ["create", "confirm", "retrieve", "confirm"]
    assert provider.movements(record.id) == 1


def test_a_create_with_unknown_outcome_is_resolved_by_the_list_lookup(container, provider, sleeps):
    provider.fail("create", 1, "unknown_after_effect")
    record = accept(container, new_merchant(container), "order-8")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    assert [c.operation for c in provider.calls] == ["create", "lookup", "confirm"]
    assert len(provider.provider_payments) == 1
    assert provider.movements(record.id) == 1


def test_a_create_that_never_arrived_is_resent_with_the_same_key(container, provider, sleeps):
    provider.fail("create", 1, "unknown_before_effect")
    record = accept(container, new_merchant(container), "order-9")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED

    creates = [c for c in provider.calls if c.operation == "create"]
    assert [c.key for c in creates] == [f"payorch-{record.id}-create"] * 2
    assert len(provider.provider_payments) == 1


def test_too_many_unknown_outcomes_park_the_payment_for_an_operator(container, provider, sleeps):
    for call in (1, 2, 3):
        provider.fail("confirm", call, "unknown_before_effect")
        provider.fail("retrieve", call, "unknown_before_effect")
    record = accept(container, new_merchant(container), "order-10")

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.PARKED

    parked = reload(container, record.id)
    assert parked.status is PaymentStatus.NEEDS_ATTENTION
    assert parked.recovery_point is RecoveryPoint.INTENT_CREATED
    assert parked.last_error and "unknown outcomes" in parked.last_error
    assert provider.movements(record.id) == 0


def test_a_stale_token_claims_nothing(container, provider, sleeps):
    record = accept(container, new_merchant(container), "order-11")

    assert run(container, record.id, record.lease_token + 5, sleeps) is ProcessResult.NOT_CLAIMED
    assert provider.calls == []


def test_a_finished_payment_is_never_processed_again(container, provider, sleeps):
    record = accept(container, new_merchant(container), "order-12")
    run(container, record.id, record.lease_token, sleeps)
    calls = len(provider.calls)

    done = reload(container, record.id)
    assert run(container, record.id, done.lease_token, sleeps) is ProcessResult.NOT_CLAIMED
    assert len(provider.calls) == calls


def test_a_worker_taken_over_mid_payment_is_fenced_and_writes_nothing(container, provider, sleeps):
    record = accept(container, new_merchant(container), "order-13")

    original_confirm = provider.confirm_payment

    def confirm_then_lose_the_lease(
        provider_payment_id: str, *, record_id: str, attempt: int, **options
    ):
        result = original_confirm(
            provider_payment_id, record_id=record_id, attempt=attempt, **options
        )
        current = reload(container, record_id)
        force(container, record_id, lease_token=current.lease_token + 1, lease_owner="other")
        return result

    provider.confirm_payment = confirm_then_lose_the_lease  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.FENCED

    after = reload(container, record.id)
    assert after.status is PaymentStatus.PROCESSING
    assert after.recovery_point is RecoveryPoint.INTENT_CREATED
    assert outcome_rows(container, record.id) == 0
    assert provider.movements(record.id) == 1  # the new holder's query will find it


# -- every recovery point resumes correctly --------------------------------------------------


def test_resume_from_accepted_creates_the_intent_once(container, provider, sleeps):
    record = accept(container, new_merchant(container), "resume-accepted")
    # A predecessor created the intent but died before recording it.
    create_payment_at_provider(provider, record)
    provider.calls.clear()
    expired = force(container, record.id, lease_owner="dead", lease_token=9)

    assert run(container, record.id, expired.lease_token, sleeps) is ProcessResult.COMPLETED
    assert len(provider.provider_payments) == 1  # the create key replayed the same intent
    assert provider.movements(record.id) == 1


def test_resume_from_intent_created_reads_and_checks_the_intent_then_confirms(
    container, provider, sleeps
):
    record = accept(container, new_merchant(container), "resume-created")
    intent = create_payment_at_provider(provider, record)
    provider.calls.clear()
    seeded = force(
        container,
        record.id,
        recovery_point="intent_created",
        provider_payment_id=intent.id,
        confirm_attempts=0,
    )

    assert run(container, record.id, seeded.lease_token, sleeps) is ProcessResult.COMPLETED
    # This run did not read the stored intent: it is compared with the record first.
    assert [c.operation for c in provider.calls] == ["retrieve", "confirm"]
    assert provider.movements(record.id) == 1


def test_resume_after_a_confirm_that_charged_queries_and_never_confirms_again(
    container, provider, sleeps
):
    record = accept(container, new_merchant(container), "resume-confirmed")
    intent = create_payment_at_provider(provider, record)
    provider.confirm_payment(intent.id, record_id=record.id, attempt=1)  # the dead worker's
    provider.calls.clear()
    seeded = force(
        container,
        record.id,
        recovery_point="intent_created",
        provider_payment_id=intent.id,
        confirm_attempts=1,
    )

    assert run(container, record.id, seeded.lease_token, sleeps) is ProcessResult.COMPLETED
    assert [c.operation for c in provider.calls] == ["retrieve"]
    assert provider.movements(record.id) == 1
    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED


def test_resume_after_a_confirm_that_never_arrived_confirms_with_the_next_key(
    container, provider, sleeps
):
    record = accept(container, new_merchant(container), "resume-lost-confirm")
    intent = create_payment_at_provider(provider, record)
    provider.calls.clear()
    seeded = force(
        container,
        record.id,
        recovery_point="intent_created",
        provider_payment_id=intent.id,
        confirm_attempts=1,
    )

    assert run(container, record.id, seeded.lease_token, sleeps) is ProcessResult.COMPLETED
    assert [c.operation for c in provider.calls] == ["retrieve", "confirm"]
    assert provider.calls[1].key == f"payorch-{record.id}-confirm-2"
    assert provider.movements(record.id) == 1


def test_resume_from_provider_settled_finishes_without_calling_the_provider(
    container, provider, sleeps
):
    record = accept(container, new_merchant(container), "resume-settled")
    seeded = force(
        container,
        record.id,
        recovery_point="provider_settled",
        provider_payment_id="pi_settled",
        provider_charge_id="ch_settled",
        provider_outcome="succeeded",
    )

    assert run(container, record.id, seeded.lease_token, sleeps) is ProcessResult.COMPLETED
    assert provider.calls == []
    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert outcome_rows(container, record.id) == 1
    assert ledger_sum(container, record.id) == 0


def test_a_long_backoff_is_deferred_to_the_row_and_the_lease_released(
    database_url, provider, sleeps
):
    container = build_container(
        database_url, provider=provider, retry_base_seconds=100.0, max_in_task_wait_seconds=1.0
    )
    try:
        provider.fail("confirm", 1, "unknown_before_effect")
        record = accept(container, new_merchant(container), "defer-1")

        # The seeded jitter draws ~19 s from a 60 s window: far beyond the in-task limit.
        assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.DEFERRED

        after = reload(container, record.id)
        assert after.status is PaymentStatus.PROCESSING
        assert after.lease_owner is None
        assert after.next_attempt_at is not None
        assert after.locked_until == after.next_attempt_at
        assert sleeps.delays == []
        # A duplicate message cannot jump the queue before the record is due.
        assert run(container, record.id, after.lease_token, sleeps) is ProcessResult.NOT_CLAIMED
    finally:
        container.close()


def test_every_statement_of_a_payment_fits_psycopgs_statement_cache(container, provider, sleeps):
    """psycopg converts a statement's placeholders once and caches the result, but only
    for statements up to MAX_CACHED_STATEMENT_LENGTH bytes (and 50 parameters); a longer
    one is converted again on every execution.  The claim once came to just over psycopg's
    default limit, and converting it on every claim was a visible share of the worker's
    CPU; ``db.engine`` raises the limit (``STATEMENT_CACHE_TEXT_LIMIT``)."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the prebuilt statements run on psycopg itself only on PostgreSQL")
    record = accept(container, new_merchant(container), "order-cache", amount=2500)
    converted: list[tuple[int, bytes]] = []  # (length, start) of each uncached conversion
    real_nocache = psycopg_queries._query2pg_nocache

    def recording(query: bytes, encoding: str) -> Any:
        converted.append((len(query), query[:60]))
        return real_nocache(query, encoding)

    psycopg_queries._query2pg_nocache = recording
    try:
        assert run(container, record.id, record.lease_token, sleeps) is ProcessResult.COMPLETED
    finally:
        psycopg_queries._query2pg_nocache = real_nocache

    assert converted == []
