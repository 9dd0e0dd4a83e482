"""Bulk retry of parked payments (``ops.bulk_retry``, decision 0088) on PostgreSQL: each
payment through the single retry (fenced, one audit row each), filtered by status, since and
connector account, never retried twice by one run, resumed by a second run, and refusing
filters that cannot be right before it reads anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.model import ApiClient
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.takeover import Actor
from orchestrator.ops import bulk_retry
from orchestrator.ops.bulk_retry import (
    BulkResult,
    BulkRetryFilter,
    BulkRetryItem,
    BulkRetrySummary,
    SkipReason,
    bulk_retry_filter,
    parse_since,
    run_bulk_retry,
)
from orchestrator.ops.commands import retry_payment
from orchestrator.ops.errors import InvalidFilter, InvalidReason, UnknownConnectorAccount
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload
from tests.integration.bulk_retry_helpers import (
    LEASE_SECONDS,
    audit_rows,
    parked,
    parked_ago,
    with_connector_account,
)

ALICE = Actor.operator("cli:alice", "alice")
PARKED = BulkRetryFilter(status="needs_attention")


@dataclass
class World:
    container: Container
    publisher: RecordingPublisher
    merchant: ApiClient

    def run(
        self,
        filters: BulkRetryFilter = PARKED,
        *,
        reason: str = "provider outage over, INC-42",
        dry_run: bool = False,
        limit: int | None = None,
        on_item: Callable[[BulkRetryItem], None] | None = None,
    ) -> BulkRetrySummary:
        return run_bulk_retry(
            self.container.uow,
            self.publisher,
            self.container.settings,
            ALICE,
            filters,
            reason=reason,
            dry_run=dry_run,
            limit=limit,
            on_item=on_item,
        )


@pytest.fixture
def world(make_postgres_database: Callable[[], str]) -> Iterator[World]:
    publisher = RecordingPublisher()
    container = build_container(
        make_postgres_database(), publisher=publisher, lease_seconds=LEASE_SECONDS
    )
    try:
        yield World(container, publisher, new_merchant(container, "shop"))
    finally:
        container.close()


def test_every_parked_payment_is_retried_once_oldest_first_with_one_audit_row_each(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_retry, "BATCH_SIZE", 2)  # three pages for five payments
    payments = [parked(world.container, world.merchant, f"parked-{n}") for n in range(5)]
    processing = accept(world.container, world.merchant, "still-processing")
    world.publisher.published.clear()

    summary = world.run()

    assert [i.payment_id for i in summary.items] == [p.id for p in payments]
    assert (summary.matched, summary.retried, summary.more) == (5, 5, False)
    assert summary.skipped == {"not_parked": 0, "finished": 0, "changed": 0}
    assert world.publisher.published == [(p.id, p.lease_token + 1) for p in payments]
    for before in payments:
        after = reload(world.container, before.id)
        assert after.status is PaymentStatus.PROCESSING
        assert after.recovery_point is RecoveryPoint.ACCEPTED  # from where it stopped
        assert (after.attempts, after.unknown_outcomes) == (0, 0)
        assert after.lease_token == before.lease_token + 1
        assert audit_rows(world.container, before.id) == [
            ("retry", "cli:alice", "provider outage over, INC-42")
        ]
    assert reload(world.container, processing.id).lease_token == processing.lease_token
    assert audit_rows(world.container, processing.id) == []


def test_a_second_run_retries_what_the_first_did_not_and_nothing_twice(world: World) -> None:
    payments = [parked(world.container, world.merchant, f"resume-{n}") for n in range(3)]

    first = world.run(limit=2)  # stopped short, as an interrupted run is
    second = world.run()
    third = world.run()

    assert [i.payment_id for i in first.items] == [payments[0].id, payments[1].id]
    assert first.more is True
    assert [i.payment_id for i in second.items] == [payments[2].id]
    assert (second.retried, second.more) == (1, False)
    assert third.matched == 0
    for payment in payments:
        assert len(audit_rows(world.container, payment.id)) == 1


def test_a_payment_that_parks_again_during_the_run_is_not_retried_twice_by_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_retry, "BATCH_SIZE", 1)  # each later page read after the re-park
    payments = [parked(world.container, world.merchant, f"again-{n}") for n in range(3)]
    first = payments[0].id

    def provider_still_down(item: BulkRetryItem) -> None:
        # A worker claims the first retried payment and parks it again at once.
        if item.payment_id == first:
            _claim_and_park(world.container, first)

    summary = world.run(on_item=provider_still_down)

    assert [i.payment_id for i in summary.items] == [p.id for p in payments]
    assert reload(world.container, first).status is PaymentStatus.NEEDS_ATTENTION
    assert len(audit_rows(world.container, first)) == 1
    # The next run is a new decision: it retries it again.
    assert [i.payment_id for i in world.run().items] == [first]


def test_a_payment_changed_after_it_was_listed_is_skipped_with_why(world: World) -> None:
    one, two, three = (parked(world.container, world.merchant, f"race-{n}") for n in range(3))
    bob = Actor.operator("cli:bob", "bob")

    def another_operator(item: BulkRetryItem) -> None:
        if item.payment_id != one.id:
            return
        # Listed in the same page as ``one``; then, before the run reaches them: bob
        # retries ``two``, and ``three`` is retried and parks again.
        for payment_id in (two.id, three.id):
            retry_payment(
                world.container.uow,
                world.publisher,
                world.container.settings,
                bob,
                payment_id,
                reason="mine",
            )
        _claim_and_park(world.container, three.id)

    summary = world.run(on_item=another_operator)

    results = {i.payment_id: (i.result, i.skip_reason) for i in summary.items}
    assert results == {
        one.id: (BulkResult.RETRIED, None),
        two.id: (BulkResult.SKIPPED, SkipReason.NOT_PARKED),
        three.id: (BulkResult.SKIPPED, SkipReason.CHANGED),
    }
    assert summary.skipped == {"not_parked": 1, "finished": 0, "changed": 1}
    assert [a for a, _, _ in audit_rows(world.container, two.id)] == ["retry"]  # bob's only
    assert [who for _, who, _ in audit_rows(world.container, two.id)] == ["cli:bob"]
    assert reload(world.container, three.id).status is PaymentStatus.NEEDS_ATTENTION


def test_since_and_connector_choose_which_parked_payments_and_a_dry_run_changes_nothing(
    world: World,
) -> None:
    earlier = parked_ago(
        world.container,
        parked(world.container, world.merchant, "earlier-outage"),
        timedelta(hours=2),
    )
    platform = parked(world.container, world.merchant, "platform")
    other, account = with_connector_account(
        world.container, new_merchant(world.container, "other-shop")
    )
    on_account = parked(world.container, other, "on-account")
    assert on_account.connector_account_id == account
    cutoff = earlier.updated_at + timedelta(hours=1)
    world.publisher.published.clear()

    def ids(since: datetime | None = None, connector: str | None = None) -> list[str]:
        filters = bulk_retry_filter(
            world.container.uow, status="needs_attention", since=since, connector=connector
        )
        summary = world.run(filters, dry_run=True)
        assert {i.result for i in summary.items} <= {BulkResult.WOULD_RETRY}
        assert summary.would_retry == summary.matched
        return [i.payment_id for i in summary.items]

    assert ids() == [earlier.id, platform.id, on_account.id]
    assert ids(since=cutoff) == [platform.id, on_account.id]
    assert ids(connector=account) == [on_account.id]
    assert ids(connector=PLATFORM_CIRCUIT_KEY) == [earlier.id, platform.id]
    assert ids(since=cutoff, connector=PLATFORM_CIRCUIT_KEY) == [platform.id]
    assert world.publisher.published == []
    for record in (earlier, platform, on_account):
        assert reload(world.container, record.id).lease_token == record.lease_token
        assert audit_rows(world.container, record.id) == []

    since_cutoff = bulk_retry_filter(world.container.uow, status="needs_attention", since=cutoff)
    done = world.run(since_cutoff)

    assert [i.payment_id for i in done.items if i.result is BulkResult.RETRIED] == [
        platform.id,
        on_account.id,
    ]
    assert reload(world.container, earlier.id).status is PaymentStatus.NEEDS_ATTENTION


def test_a_refused_publish_still_retries_and_is_counted_for_the_sweeper(world: World) -> None:
    payment = parked(world.container, world.merchant, "broker-down")
    world.publisher.fail = True

    summary = world.run()

    assert (summary.retried, summary.not_published) == (1, 1)
    assert reload(world.container, payment.id).status is PaymentStatus.PROCESSING


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ("processing", "leases takeover"),
        ("succeeded", "finished"),
        ("failed", "new payment"),
        ("requires_capture", "capture or cancel"),
        ("parked", "not a payment status"),
    ],
)
def test_a_status_other_than_needs_attention_is_refused_with_what_to_do(
    world: World, status: str, says: str
) -> None:
    with pytest.raises(InvalidFilter) as refused:
        bulk_retry_filter(world.container.uow, status=status)
    assert says in refused.value.message


def test_every_other_payment_status_is_refused_with_its_own_reason(world: World) -> None:
    for status in PaymentStatus:
        if status is PaymentStatus.NEEDS_ATTENTION:
            continue
        with pytest.raises(InvalidFilter) as refused:
            bulk_retry_filter(world.container.uow, status=status.value)
        assert "not a payment status" not in refused.value.message, status


def test_bad_filters_and_a_blank_reason_are_refused_before_anything_is_written(
    world: World,
) -> None:
    payment = parked(world.container, world.merchant, "untouched")
    uow = world.container.uow
    for text in ("2026-12-05T14:00:00", "yesterday", ""):
        with pytest.raises(InvalidFilter):
            parse_since(text)
    # No UTC equivalent (before year 1, after year 9999): refused by name, not an overflow.
    for text in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00"):
        with pytest.raises(InvalidFilter, match="out of range"):
            parse_since(text)
    assert parse_since("2026-12-05T14:00:00Z").utcoffset() == timedelta(0)
    with pytest.raises(InvalidFilter, match="connector account id"):
        bulk_retry_filter(uow, status="needs_attention", connector="acct_1")
    with pytest.raises(UnknownConnectorAccount):
        bulk_retry_filter(uow, status="needs_attention", connector="ca_" + "0" * 24)
    with pytest.raises(InvalidReason):
        world.run(reason="   ")

    assert reload(world.container, payment.id).lease_token == payment.lease_token
    assert audit_rows(world.container, payment.id) == []


def _claim_and_park(container: Container, payment_id: str) -> None:
    with container.uow() as uow:
        now = uow.now()
        record = uow.payments.get(payment_id)
        assert record is not None
        claimed = uow.leases.claim(
            payment_id,
            carried_token=record.lease_token,
            owner="worker-2",
            now=now,
            lease_until=now + timedelta(seconds=LEASE_SECONDS),
        )
        assert claimed is not None
        assert uow.leases.park(payment_id, token=claimed.lease_token, error="again", now=now)
        uow.commit()
