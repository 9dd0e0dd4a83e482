"""Provider truth in the worker protocol (issue 10), on a real database with the scripted
fake provider: a foreign intent is never confirmed, the lookup is bounded and resumes."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.db.tables import ledger_lines
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import accept, count_rows, force, new_merchant, reload


class Sleeps:
    def __call__(self, delay: float) -> None:
        pass


class Interrupted(Exception):
    """Stands for Celery's SoftTimeLimitExceeded (or any cut mid-scan)."""


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(
        database_url,
        provider=provider,
        max_attempts=4,
        retry_base_seconds=0.01,
        retry_cap_seconds=0.01,
        lookup_pages_per_attempt=3,
    )
    yield built
    built.close()


def run(container: Container, payment_id: str, token: int, **kw) -> ProcessResult:
    return process_payment(
        container.runner(),
        payment_id,
        token,
        owner="test",
        sleep=Sleeps(),
        rng=random.Random(1),
        **kw,
    )


def operations(provider: FakeProvider) -> list[str]:
    return [c.operation for c in provider.calls]


def rush_after_create(provider: FakeProvider, count: int) -> None:
    """Our create lands, then ``count`` newer intents arrive (a busy account)."""
    original_create = provider.create_payment

    def create_then_rush(**kw):
        try:
            return original_create(**kw)
        finally:
            for _ in range(count):
                provider.add_intent(record_id=None, amount=100)

    provider.create_payment = create_then_rush  # type: ignore[method-assign]


def test_a_foreign_intent_naming_the_record_is_never_confirmed_and_parks_the_payment(
    container, provider
):
    record = accept(container, new_merchant(container), "foreign-only", amount=23001)
    foreign = provider.add_intent(record_id=record.id, amount=523001)
    for n in range(1, 10):
        provider.fail("create", n, "unknown_before_effect")  # our create never lands

    assert run(container, record.id, record.lease_token) is ProcessResult.PARKED

    parked = reload(container, record.id)
    assert parked.status is PaymentStatus.NEEDS_ATTENTION
    assert foreign in (parked.last_error or "")
    assert "amount 523001 != 23001" in (parked.last_error or "")
    assert [r["id"] for r in parked.rejected_intents] == [foreign]
    assert "confirm" not in operations(provider)
    assert provider.charges == {}
    assert count_rows(container, ledger_lines, record.id) == 0
    # Each round re-sent the same create key (safe), until the attempts ran out.
    assert operations(provider).count("create") == 4
    assert {c.key for c in provider.calls if c.operation == "create"} == {
        f"payorch-{record.id}-create"
    }


def test_a_create_still_in_flight_when_only_a_foreign_intent_is_listed_is_adopted_on_resend(
    container, provider
):
    record = accept(container, new_merchant(container), "in-flight", amount=23005)
    foreign = provider.add_intent(record_id=record.id, amount=523005)
    provider.fail("create", 1, "unknown_before_effect")  # lands only on the resend

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert done.provider_payment_id not in (None, foreign)
    assert provider.charges == {done.provider_payment_id: 1}
    assert [r["id"] for r in done.rejected_intents] == [foreign]  # still visible to ops
    assert operations(provider) == ["create", "lookup", "create", "confirm"]


def test_our_intent_beside_an_older_foreign_one_is_the_one_confirmed(container, provider):
    record = accept(container, new_merchant(container), "ours-and-foreign", amount=23002)
    foreign = provider.add_intent(record_id=record.id, amount=523002)
    provider.fail("create", 1, "unknown_after_effect")  # ours exists, the answer was lost

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert done.provider_payment_id != foreign
    assert provider.charges == {done.provider_payment_id: 1}
    assert provider.provider_payments[done.provider_payment_id].amount == 23002
    assert done.settled_amount == 23002
    assert operations(provider) == ["create", "lookup", "confirm"]


def test_a_create_answer_that_does_not_match_the_record_is_never_confirmed(container, provider):
    record = accept(container, new_merchant(container), "create-mismatch", amount=3000)
    # Someone made an intent under our create key with another amount (an impossible
    # Stripe answer for the same key and params, but nothing we read is trusted blindly).
    provider.saved[f"payorch-{record.id}-create"] = provider._view(
        provider.provider_payments[provider.add_intent(record_id=record.id, amount=9999)]
    )

    assert run(container, record.id, record.lease_token) is ProcessResult.PARKED

    parked = reload(container, record.id)
    assert parked.recovery_point is RecoveryPoint.ACCEPTED
    assert parked.rejected_intents[0]["amount"] == 9999
    assert operations(provider) == ["create"]


def test_a_retrieve_after_a_timeout_that_shows_another_amount_is_never_finished(
    container, provider
):
    record = accept(container, new_merchant(container), "retrieve-mismatch", amount=4000)
    provider.fail("confirm", 1, "unknown_after_effect")

    def tamper() -> None:
        # Between our confirm and our query, the intent turns out to carry another amount.
        [intent] = provider.provider_payments.values()
        intent.amount = 40000

    original = provider.retrieve_payment

    def retrieve(provider_payment_id: str, **options):
        tamper()
        return original(provider_payment_id, **options)

    provider.retrieve_payment = retrieve  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token) is ProcessResult.PARKED

    parked = reload(container, record.id)
    assert parked.status is PaymentStatus.NEEDS_ATTENTION
    assert parked.provider_outcome is None  # never settled, never booked
    assert count_rows(container, ledger_lines, record.id) == 0
    assert "amount 40000 != 4000" in (parked.last_error or "")


def test_a_lookup_that_runs_out_of_pages_resumes_from_its_cursor(container, provider):
    record = accept(container, new_merchant(container), "busy-account", amount=5000)
    provider.fail("create", 1, "unknown_after_effect")
    rush_after_create(provider, 700)  # 8 pages, 3 per attempt

    first = run(container, record.id, record.lease_token)

    assert first is ProcessResult.DEFERRED
    paused = reload(container, record.id)
    assert paused.lookup_pending and paused.lookup_pages == 3
    assert paused.lookup_cursor is not None
    token = force(container, record.id, next_attempt_at=None, locked_until=None).lease_token
    assert run(container, record.id, token) is ProcessResult.DEFERRED
    token = force(container, record.id, next_attempt_at=None, locked_until=None).lease_token
    assert run(container, record.id, token) is ProcessResult.COMPLETED

    lookups = [c for c in provider.calls if c.operation == "lookup"]
    assert len(lookups) == 8  # no page read twice
    assert lookups[3].provider_payment_id == paused.lookup_cursor  # attempt 2 starts at the cursor
    assert operations(provider).count("create") == 1
    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert not done.lookup_pending and done.lookup_cursor is None


def test_a_lookup_cut_mid_scan_keeps_its_cursor(container, provider):
    record = accept(container, new_merchant(container), "cut-scan", amount=5100)
    provider.fail("create", 1, "unknown_after_effect")
    rush_after_create(provider, 250)
    original = provider.list_payments
    calls = {"n": 0}

    def list_then_cut(**kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Interrupted()
        return original(**kw)

    provider.list_payments = list_then_cut  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token, interruptions=(Interrupted,)) is (
        ProcessResult.DEFERRED
    )

    cut = reload(container, record.id)
    assert cut.lookup_pending and cut.lookup_pages == 2 and cut.lookup_cursor is not None


def test_a_failed_page_is_an_unknown_outcome_and_the_lookup_stays_owed(container, provider):
    record = accept(container, new_merchant(container), "failed-page", amount=5200)
    provider.fail("create", 1, "unknown_before_effect")
    provider.fail("lookup", 1, "unknown_before_effect")

    result = run(container, record.id, record.lease_token)

    after = reload(container, record.id)
    # Never "absent": no second create went out on the strength of a failed page.
    assert operations(provider)[:2] == ["create", "lookup"]
    if result is ProcessResult.COMPLETED:
        assert operations(provider)[2] == "lookup"
    else:
        assert after.lookup_pending
    assert after.unknown_outcomes >= 2


def test_a_create_replaying_a_saved_500_tries_the_lookup_every_time_before_parking(
    container, provider
):
    record = accept(container, new_merchant(container), "saved-500", amount=5300)
    provider.fail("create", 1, "saved_500_after_effect")
    original_create = provider.create_payment

    def create_leaving_nothing(**kw):
        try:
            return original_create(**kw)
        finally:
            provider.provider_payments.clear()  # the 500 was saved, and no intent survived it

    provider.create_payment = create_leaving_nothing  # type: ignore[method-assign]

    assert run(container, record.id, record.lease_token) is ProcessResult.PARKED

    ops = operations(provider)
    creates = [i for i, op in enumerate(ops) if op == "create"]
    assert len(creates) >= 2
    for index in creates:
        assert ops[index + 1] == "lookup"  # every unknown create is followed by a lookup
    assert reload(container, record.id).unknown_outcomes == 4
