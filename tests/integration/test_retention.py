"""Retention of idempotency data, at the window's edge, in frozen time, on SQLite and
PostgreSQL.  The window counts from the later of creation and finish; only the key,
fingerprint and stored response go, never the payment or its business rows."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from prometheus_client import REGISTRY

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.db.tables import ledger_lines
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.engine.takeover import Actor
from orchestrator.events.event_reads import get_event, list_events
from orchestrator.ops.commands import take_over_payment
from orchestrator.services.payment_reads import find_payment_by_key, get_payment
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import accept, count_rows, force, new_merchant, outcome_rows, reload

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
RETENTION_HOURS = 24.0
WINDOW = timedelta(hours=RETENTION_HOURS)
TICK = timedelta(microseconds=1)


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(
        database_url,
        provider=provider,
        clock=FrozenClock(),
        idempotency_retention_hours=RETENTION_HOURS,
        retention_batch_size=2,
    )
    yield built
    built.close()


@pytest.fixture
def clock(container: Container) -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        yield frozen


@pytest.fixture
def merchant(container: Container, clock: FrozenDateTimeFactory) -> ApiClient:
    return new_merchant(container)


def pay(container: Container, merchant: ApiClient, key: str, amount: int = 1000) -> PaymentRecord:
    """Accept and process to the end with the fake provider: a finished payment with its
    outcome row and ledger lines."""
    record = accept(container, merchant, key, amount=amount)
    result = process_payment(
        container.runner(),
        record.id,
        record.lease_token,
        owner="w",
        sleep=lambda _s: None,
        rng=random.Random(1),
    )
    assert result is ProcessResult.COMPLETED
    return reload(container, record.id)


def purged() -> float:
    return REGISTRY.get_sample_value("payorch_idempotency_keys_purged_total") or 0.0


def test_a_finished_payments_key_is_kept_until_the_window_ends_and_purged_after(
    container, clock, merchant
):
    record = pay(container, merchant, "order-1")
    assert record.completed_at == T0

    clock.move_to(T0 + WINDOW)
    assert container.sweeper().purge_expired_idempotency_data() == 0
    kept = reload(container, record.id)
    assert kept.idempotency_key == "order-1"
    assert kept.request_fingerprint is not None and kept.response_body is not None

    clock.move_to(T0 + WINDOW + TICK)
    before = purged()
    assert container.sweeper().run_once().purged_keys == 1
    assert purged() == before + 1
    gone = reload(container, record.id)
    assert gone.idempotency_key is None
    assert gone.request_fingerprint is None and gone.response_body is None
    assert gone.status is PaymentStatus.SUCCEEDED  # the payment itself stays


def test_the_window_counts_from_the_finish_of_a_slow_payment(container, clock, merchant):
    record = accept(container, merchant, "slow")
    clock.tick(timedelta(hours=10))
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: None)
    finished_at = T0 + timedelta(hours=10)
    assert reload(container, record.id).completed_at == finished_at

    clock.move_to(T0 + WINDOW + timedelta(hours=1))  # created more than a window ago
    assert container.sweeper().purge_expired_idempotency_data() == 0
    clock.move_to(finished_at + WINDOW + TICK)
    assert container.sweeper().purge_expired_idempotency_data() == 1


def test_unfinished_payments_keep_their_keys_however_old(container, clock, merchant):
    processing = accept(container, merchant, "still-processing")
    parked = force(container, accept(container, merchant, "parked").id, status="needs_attention")

    clock.move_to(T0 + 100 * WINDOW)
    assert container.sweeper().purge_expired_idempotency_data() == 0
    assert reload(container, processing.id).idempotency_key == "still-processing"
    assert reload(container, parked.id).idempotency_key == "parked"


def test_after_the_purge_the_same_key_creates_a_new_payment(container, clock, merchant):
    old = pay(container, merchant, "order-1", amount=1000)
    clock.move_to(T0 + WINDOW + TICK)
    container.sweeper().run_once()

    new = accept(container, merchant, "order-1", amount=1000)

    assert new.id != old.id
    assert new.status is PaymentStatus.PROCESSING
    reads = container.read_only_uow
    assert find_payment_by_key(reads, merchant, "order-1") == new
    assert get_payment(reads, merchant, old.id) is not None  # still readable by id


def test_the_purge_keeps_outcomes_ledger_lines_and_the_audit_trail(container, clock, merchant):
    record = pay(container, merchant, "order-1")
    ledger_before = count_rows(container, ledger_lines, record.id)
    assert ledger_before > 0
    # An audited operator action on an earlier payment of the same merchant.
    stuck = accept(container, merchant, "order-2")
    take_over_payment(
        container.uow,
        container.publisher,
        container.settings,
        Actor.operator("cli:ops", "ops"),
        stuck.id,
        reason="test",
        force=True,
    )

    clock.move_to(T0 + WINDOW + TICK)
    container.sweeper().purge_expired_idempotency_data()

    assert reload(container, record.id).idempotency_key is None
    assert outcome_rows(container, record.id) == 1
    assert count_rows(container, ledger_lines, record.id) == ledger_before
    with container.uow() as uow:
        assert [e.payment_id for e in uow.audit.list()] == [stuck.id]


def test_the_purge_works_through_a_backlog_in_batches(container, clock, merchant):
    records = [pay(container, merchant, f"order-{n}") for n in range(5)]  # batch size: 2

    clock.move_to(T0 + WINDOW + TICK)
    assert container.sweeper().purge_expired_idempotency_data() == 5
    assert all(reload(container, r.id).idempotency_key is None for r in records)
    assert container.sweeper().purge_expired_idempotency_data() == 0


def test_after_the_purge_the_payments_events_no_longer_show_its_key(container, clock, merchant):
    record = pay(container, merchant, "order-raw-key")

    def keys_shown() -> list[object]:
        page = list_events(container.uow, merchant.id, after=None, event_type=None, limit=10)
        one = get_event(container.uow, page.events[0].public_id, client_id=merchant.id)
        assert one is not None
        return [e.payload["idempotency_key"] for e in [*page.events, one]]

    assert keys_shown() == ["order-raw-key", "order-raw-key"]
    clock.move_to(T0 + WINDOW + TICK)
    container.sweeper().run_once()

    assert keys_shown() == [None, None]
    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED


def _store_provider_event(container: Container, event_id: str) -> None:
    with container.uow() as uow:
        uow.provider_events.insert_once(
            event_id=event_id,
            provider="stripe",
            event_type="payment_intent.succeeded",
            provider_created=0,
            object_type="payment_intent",
            object_id="pi_x",
            provider_payment_id="pi_x",
            payment_id=None,
            payload={"id": event_id, "data": {"object": {"client_secret": "pi_x_secret_y"}}},
            woke_payment=False,
            now=uow.now(),
        )
        uow.commit()


def _provider_event_ids(container: Container) -> set[str]:
    with container.uow() as uow:
        return {
            event_id
            for event_id in ("evt_old", "evt_new")
            if uow.provider_events.get(event_id) is not None
        }


def test_provider_events_are_deleted_after_their_retention(container, clock, merchant):
    days = container.settings.provider_event_retention_days
    _store_provider_event(container, "evt_old")
    clock.move_to(T0 + timedelta(days=1))
    _store_provider_event(container, "evt_new")

    clock.move_to(T0 + timedelta(days=days))
    assert container.sweeper().run_once().purged_provider_events == 0
    clock.move_to(T0 + timedelta(days=days) + TICK)
    assert container.sweeper().run_once().purged_provider_events == 1

    assert _provider_event_ids(container) == {"evt_new"}
