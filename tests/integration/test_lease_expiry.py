"""Lease expiry in frozen time, on SQLite and PostgreSQL.

freezegun moves the clock; ``FrozenClock`` hands the frozen instant to the SQL
(``coalesce(:now, now())``), so every lease comparison below runs in the database exactly as
in production, and no test waits for a lease to run out.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from prometheus_client import REGISTRY

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.domain.lease_state import LeaseState
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.engine.takeover import Actor, TakeoverResult, take_over_lease
from orchestrator.ops.lease_reads import list_leases
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import (
    accept,
    finish_with_token,
    force,
    new_merchant,
    reload,
    settle_success,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = 60.0
DISPATCH = 30.0
MAX_ATTEMPTS = 3
TICK = timedelta(microseconds=1)


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def container(database_url: str, publisher: RecordingPublisher) -> Iterator[Container]:
    # Built (and migrated) before time is frozen: a C extension imported under freezegun's
    # patched datetime warns about a size mismatch, and warnings are errors here.
    built = build_container(
        database_url,
        publisher=publisher,
        clock=FrozenClock(),
        lease_seconds=LEASE,
        dispatch_lease_seconds=DISPATCH,
        max_attempts=MAX_ATTEMPTS,
    )
    yield built
    built.close()


@pytest.fixture
def clock(container: Container) -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        yield frozen


def claim(container: Container, record: PaymentRecord, owner: str = "worker-1") -> PaymentRecord:
    """What a worker's first transaction does with the token its message carried."""
    with container.uow() as uow:
        now = uow.now()
        claimed = uow.leases.claim(
            record.id,
            carried_token=record.lease_token,
            owner=owner,
            now=now,
            lease_until=now + timedelta(seconds=LEASE),
        )
        uow.commit()
    assert claimed is not None
    return claimed


def renew(container: Container, record: PaymentRecord) -> PaymentRecord | None:
    with container.uow() as uow:
        now = uow.now()
        renewed = uow.leases.renew(
            record.id, token=record.lease_token, now=now, lease_until=now + timedelta(seconds=LEASE)
        )
        uow.commit()
    return renewed


def takeovers(by: str = "sweeper") -> float:
    value = REGISTRY.get_sample_value("payorch_lease_takeovers_total", {"by": by})
    return value or 0.0


def test_a_lease_is_live_until_locked_until_and_expired_from_then_on(container, clock):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    assert record.locked_until == T0 + timedelta(seconds=LEASE)

    clock.move_to(record.locked_until - TICK)
    reads = container.read_only_uow
    assert [r.id for r in list_leases(reads, LeaseState.ACTIVE).records] == [record.id]
    assert list_leases(reads, LeaseState.EXPIRED).records == []
    assert container.sweeper().run_once().taken_over == []

    clock.move_to(record.locked_until)
    assert list_leases(reads, LeaseState.ACTIVE).records == []
    assert [r.id for r in list_leases(reads, LeaseState.EXPIRED).records] == [record.id]
    assert container.sweeper().run_once().taken_over == [record.id]


def test_the_sweeper_takes_over_only_expired_leases(container, clock, publisher):
    merchant = new_merchant(container)
    never_claimed = accept(container, merchant, "lost-message")  # dispatch lease: 30 s
    crashed = claim(container, accept(container, merchant, "crashed-worker"))  # lease: 60 s
    clock.tick(timedelta(seconds=45))
    working = claim(container, accept(container, merchant, "working"))  # until T0+105 s
    parked = force(
        container,
        accept(container, merchant, "parked").id,
        status="needs_attention",
        locked_until=None,
    )
    done = force(
        container,
        accept(container, merchant, "done").id,
        status="succeeded",
        recovery_point="completed",
        locked_until=None,
        completed_at=T0,
    )
    publisher.published.clear()

    clock.move_to(T0 + timedelta(seconds=LEASE))
    before = takeovers()
    report = container.sweeper().run_once()

    assert sorted(report.taken_over) == sorted([never_claimed.id, crashed.id])
    assert report.due_retries == report.parked == report.publish_failures == []
    assert takeovers() == before + 2
    assert sorted(publisher.published) == sorted(
        [(never_claimed.id, never_claimed.lease_token + 1), (crashed.id, crashed.lease_token + 1)]
    )
    for untouched in (working, parked, done):
        assert reload(container, untouched.id).lease_token == untouched.lease_token
    taken = reload(container, crashed.id)
    assert taken.lease_owner == "dispatch:sweeper"
    assert taken.locked_until == T0 + timedelta(seconds=LEASE + DISPATCH)
    assert taken.attempts == crashed.attempts  # a takeover is not an attempt; a claim is


def test_renewal_keeps_a_lease_alive(container, clock):
    record = claim(container, accept(container, new_merchant(container), "k-1"))

    clock.tick(timedelta(seconds=LEASE - 10))
    renewed = renew(container, record)
    assert renewed is not None
    assert renewed.locked_until == T0 + timedelta(seconds=2 * LEASE - 10)

    clock.move_to(record.locked_until + timedelta(seconds=30))  # the first lease is long gone
    assert container.sweeper().run_once().taken_over == []
    assert reload(container, record.id).lease_token == record.lease_token

    clock.move_to(renewed.locked_until)
    assert container.sweeper().run_once().taken_over == [record.id]


def test_zombie_worker_cannot_renew_or_finish_after_takeover(container, clock, publisher):
    zombie = settle_success(
        container, claim(container, accept(container, new_merchant(container), "k"))
    )
    clock.tick(timedelta(seconds=LEASE))
    assert container.sweeper().run_once().taken_over == [zombie.id]

    assert renew(container, zombie) is None
    assert finish_with_token(container, zombie) is None
    after = reload(container, zombie.id)
    assert after.status is PaymentStatus.PROCESSING
    assert after.lease_token == zombie.lease_token + 1
    # The new holder, claiming with the token its message carries, may finish.
    _, token = publisher.published[-1]
    successor = claim(container, after)
    assert successor.lease_token == token + 1
    assert finish_with_token(container, successor) is not None


def test_the_new_token_claims_and_the_old_message_does_not(container, clock, publisher):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    clock.tick(timedelta(seconds=LEASE))
    container.sweeper().run_once()
    payment_id, new_token = publisher.published[-1]

    with container.uow() as uow:
        now = uow.now()
        stale = uow.leases.claim(
            payment_id,
            carried_token=record.lease_token,
            owner="redelivered",
            now=now,
            lease_until=now + timedelta(seconds=LEASE),
        )
        fresh = uow.leases.claim(
            payment_id,
            carried_token=new_token,
            owner="worker-2",
            now=now,
            lease_until=now + timedelta(seconds=LEASE),
        )
        uow.commit()
    assert stale is None
    assert fresh is not None
    assert fresh.lease_owner == "worker-2"


def test_a_due_deferral_is_a_due_retry_not_a_takeover(container, clock, publisher):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    with container.uow() as uow:
        deferred = uow.leases.defer(
            record.id,
            token=record.lease_token,
            until=T0 + timedelta(seconds=300),
            error="429 rate_limit",
            now=uow.now(),
        )
        uow.commit()
    assert deferred is not None and deferred.lease_owner is None
    publisher.published.clear()

    clock.move_to(T0 + timedelta(seconds=300) - TICK)
    assert container.sweeper().run_once().requeued == []

    clock.move_to(T0 + timedelta(seconds=300))
    before = takeovers()
    report = container.sweeper().run_once()
    assert report.due_retries == [record.id]
    assert report.taken_over == []
    assert takeovers() == before
    assert publisher.published == [(record.id, record.lease_token + 1)]
    assert reload(container, record.id).next_attempt_at is None


def test_a_record_out_of_attempts_goes_to_needs_attention_not_back_to_the_queue(
    container, clock, publisher
):
    record = accept(container, new_merchant(container), "k-1")
    for attempt in range(MAX_ATTEMPTS):
        record = claim(container, record, owner=f"crashing-worker-{attempt}")
        clock.tick(timedelta(seconds=LEASE))
        report = container.sweeper().run_once()
        if attempt < MAX_ATTEMPTS - 1:
            assert report.taken_over == [record.id]
            record = reload(container, record.id)
    assert report.parked == [record.id]
    assert report.taken_over == []
    # The accept's message and one per takeover; none for the park.
    assert len(publisher.published) == 1 + (MAX_ATTEMPTS - 1)
    parked = reload(container, record.id)
    assert parked.status is PaymentStatus.NEEDS_ATTENTION
    assert parked.recovery_point is RecoveryPoint.ACCEPTED  # a retry resumes from here
    assert parked.lease_token == record.lease_token + 1  # the last holder is fenced too
    assert parked.locked_until is None
    assert parked.attempts == MAX_ATTEMPTS


def test_parking_keeps_the_workers_last_error(container, clock):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    record = force(
        container, record.id, attempts=MAX_ATTEMPTS, last_error="OutcomeUnknown: read timeout"
    )
    clock.tick(timedelta(seconds=LEASE))
    assert container.sweeper().run_once().parked == [record.id]
    error = reload(container, record.id).last_error
    assert error is not None
    assert "OutcomeUnknown: read timeout" in error
    assert f"PAYORCH_MAX_ATTEMPTS={MAX_ATTEMPTS}" in error


def test_a_failed_publish_expires_back_to_the_sweeper(container, clock, publisher):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    clock.tick(timedelta(seconds=LEASE))
    publisher.fail = True
    report = container.sweeper().run_once()
    assert report.taken_over == [record.id]
    assert report.publish_failures == [record.id]

    # The takeover committed anyway; its dispatch lease is live until it runs out.
    clock.tick(timedelta(seconds=DISPATCH) - TICK)
    assert container.sweeper().run_once().taken_over == []
    publisher.fail = False
    clock.tick(TICK)
    assert container.sweeper().run_once().taken_over == [record.id]
    assert publisher.published[-1] == (record.id, record.lease_token + 2)


def test_a_takeover_on_a_stale_token_changes_nothing(container, clock):
    record = claim(container, accept(container, new_merchant(container), "k-1"))
    clock.tick(timedelta(seconds=LEASE))
    with container.uow() as uow:
        now = uow.now()
        outcome = take_over_lease(
            uow,
            record.id,
            actor=Actor.sweeper("test"),
            reason="lease expired",
            force=False,
            now=now,
            lease_seconds=DISPATCH,
            max_attempts=MAX_ATTEMPTS,
            expected_token=record.lease_token - 1,
        )
        uow.commit()
    assert outcome.result is TakeoverResult.CHANGED_CONCURRENTLY
    assert outcome.new_token is None
    assert reload(container, record.id).lease_token == record.lease_token


def test_the_sweeper_claims_at_most_a_batch_and_says_when_more_is_due(database_url, publisher):
    container = build_container(
        database_url,
        publisher=publisher,
        clock=FrozenClock(),
        dispatch_lease_seconds=DISPATCH,
        sweep_batch_size=3,
    )
    try:
        with freeze_time(T0) as clock:
            merchant = new_merchant(container)
            ids = {accept(container, merchant, f"k-{n}").id for n in range(5)}
            clock.tick(timedelta(seconds=DISPATCH))
            first = container.sweeper().run_once()
            second = container.sweeper().run_once()
            third = container.sweeper().run_once()
    finally:
        container.close()
    assert len(first.taken_over) == 3 and first.batch_full
    assert len(second.taken_over) == 2 and not second.batch_full
    assert set(first.taken_over) | set(second.taken_over) == ids
    assert third.taken_over == []


def test_a_lost_wake_up_is_processed_once_its_dispatch_lease_runs_out(database_url, publisher):
    """The committed row is the durable signal, the message only a wake-up: an accept whose
    message the broker lost (the publish returned, the message never arrived) is re-queued
    by the sweeper when its dispatch lease ends, and then processed once."""
    provider = FakeProvider()
    container = build_container(
        database_url,
        publisher=publisher,
        provider=provider,
        clock=FrozenClock(),
        lease_seconds=LEASE,
        dispatch_lease_seconds=DISPATCH,
        max_attempts=MAX_ATTEMPTS,
    )
    try:
        with freeze_time(T0) as clock:
            record = accept(container, new_merchant(container), "k-lost")
            assert publisher.published == [(record.id, record.lease_token)]
            publisher.published.clear()  # the wake-up is lost

            clock.tick(timedelta(seconds=DISPATCH) - TICK)
            assert container.sweeper().run_once().taken_over == []
            clock.tick(TICK)
            assert container.sweeper().run_once().taken_over == [record.id]
            [(payment_id, token)] = publisher.published
            assert (payment_id, token) == (record.id, record.lease_token + 1)

            result = process_payment(container.runner(), payment_id, token, owner="worker-1")
        assert result is ProcessResult.COMPLETED
        assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
        assert provider.movements(record.id) == 1
    finally:
        container.close()
