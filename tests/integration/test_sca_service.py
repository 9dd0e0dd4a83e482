"""Issue 12's charge side as a service, on a real database, with the scripted fake
provider: the Part 2 request fields reach the provider, authentication waits without a
lease, and the re-check and the timeout run in frozen time (freezegun + the DB clock seam:
nothing sleeps out a timeout)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import PaymentStatus, WaitingFor
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, ledger_sum, new_merchant, outbox_types, reload

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RECHECK = 300
TIMEOUT = 3600
MAX_ATTEMPTS = 3
THREE_DS = "pm_card_threeDSecure2Required"
RETURN_URL = "https://shop.example/back"


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def container(
    database_url: str, provider: FakeProvider, publisher: RecordingPublisher
) -> Iterator[Container]:
    # Built (and migrated) before time is frozen (see test_lease_expiry).
    built = build_container(
        database_url,
        provider=provider,
        publisher=publisher,
        clock=FrozenClock(),
        max_attempts=MAX_ATTEMPTS,
        action_recheck_seconds=RECHECK,
        action_timeout_seconds=TIMEOUT,
        processing_recheck_seconds=RECHECK,
    )
    yield built
    built.close()


@pytest.fixture
def clock(container: Container) -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        yield frozen


def run(container: Container, payment_id: str, token: int) -> ProcessResult:
    return process_payment(
        container.runner(),
        payment_id,
        token,
        owner="test-worker",
        sleep=lambda _: None,
        rng=random.Random(7),
    )


def sweep_and_run(container: Container, publisher: RecordingPublisher) -> list[ProcessResult]:
    """One sweeper pass, then every task it published, as a worker would run them."""
    publisher.published.clear()
    container.sweeper().run_once()
    return [run(container, pid, token) for pid, token in list(publisher.published)]


def three_ds_payment(container: Container, key: str = "3ds", **fields: object) -> PaymentRecord:
    fields = {"off_session": False, "return_url": RETURN_URL, **fields}
    return accept(container, new_merchant(container), key, payment_method=THREE_DS, **fields)  # type: ignore[arg-type]


def intent_of(container: Container, record: PaymentRecord) -> str:
    provider_payment_id = reload(container, record.id).provider_payment_id
    assert provider_payment_id is not None
    return provider_payment_id


# -- the request fields reach the provider -------------------------------------------------


def test_the_customer_goes_on_the_create_and_off_session_and_return_url_on_the_confirm(
    container: Container, provider: FakeProvider, clock: FrozenDateTimeFactory
) -> None:
    record = accept(
        container,
        new_merchant(container),
        "saved-card",
        customer="cus_Saved1",
        off_session=False,
        return_url=RETURN_URL,
    )

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
    create, confirm = provider.calls
    assert create.params == {"customer": "cus_Saved1"}
    assert confirm.params == {"off_session": False, "return_url": RETURN_URL}
    assert provider.provider_payments[intent_of(container, record)].customer == "cus_Saved1"


def test_a_payment_without_the_new_fields_sends_none_of_them(
    container: Container, provider: FakeProvider, clock: FrozenDateTimeFactory
) -> None:
    record = accept(container, new_merchant(container), "plain")

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    assert [call.params for call in provider.calls] == [{}, {}]


# -- requires_action: waiting for the customer, without a lease ----------------------------


def test_a_card_that_needs_authentication_waits_for_the_customer_without_a_lease(
    container: Container, provider: FakeProvider, clock: FrozenDateTimeFactory
) -> None:
    record = three_ds_payment(container)

    assert run(container, record.id, record.lease_token) is ProcessResult.WAITING

    waiting = reload(container, record.id)
    assert waiting.status is PaymentStatus.PROCESSING  # stored; shown as requires_action
    assert waiting.waiting_for is WaitingFor.CUSTOMER
    assert waiting.lease_owner is None
    assert waiting.next_attempt_at == T0 + timedelta(seconds=RECHECK)
    assert waiting.waiting_since == T0
    assert waiting.attempts == 0  # a wait is not a failed attempt
    shown = payment_representation(waiting)
    assert shown["status"] == "requires_action"
    assert shown["next_action"]["type"] == "redirect_to_url"
    assert shown["next_action"]["redirect_to_url"]["return_url"] == RETURN_URL
    assert shown["client_secret"] == f"{waiting.provider_payment_id}_secret_fake"
    assert outbox_types(container, record.id) == ["payment.requires_action"]
    assert provider.movements(record.id) == 0


def test_the_recheck_finds_the_authenticated_intent_and_the_payment_succeeds_once(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = three_ds_payment(container)
    run(container, record.id, record.lease_token)

    clock.tick(timedelta(seconds=RECHECK - 1))
    assert sweep_and_run(container, publisher) == []  # not due yet
    clock.tick(timedelta(seconds=1))
    assert sweep_and_run(container, publisher) == [ProcessResult.WAITING]  # still waiting
    again = reload(container, record.id)
    assert again.next_attempt_at == T0 + timedelta(seconds=2 * RECHECK)
    assert again.waiting_since == T0  # the timeout still counts from the first ask
    assert outbox_types(container, record.id) == ["payment.requires_action"]  # not twice

    provider.authenticate(intent_of(container, record))
    clock.tick(timedelta(seconds=RECHECK))
    assert sweep_and_run(container, publisher) == [ProcessResult.COMPLETED]

    done = reload(container, record.id)
    assert done.status is PaymentStatus.SUCCEEDED
    assert payment_representation(done)["next_action"] is None
    assert payment_representation(done)["client_secret"] is None
    assert done.waiting_for is None
    assert provider.movements(record.id) == 1
    assert ledger_sum(container, record.id) == 0
    assert outbox_types(container, record.id) == ["payment.requires_action", "payment.succeeded"]
    assert [c.operation for c in provider.calls].count("confirm") == 1


def test_an_abandoned_authentication_is_canceled_at_the_provider_after_the_timeout(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = three_ds_payment(container)
    run(container, record.id, record.lease_token)

    rechecks = 0
    while reload(container, record.id).status is PaymentStatus.PROCESSING:
        clock.tick(timedelta(seconds=RECHECK))
        sweep_and_run(container, publisher)
        rechecks += 1
        assert rechecks <= TIMEOUT // RECHECK, "never timed out"

    done = reload(container, record.id)
    assert rechecks == TIMEOUT // RECHECK  # many more re-checks than MAX_ATTEMPTS, never parked
    assert done.status is PaymentStatus.CANCELED
    assert done.failure is not None and done.failure.code == "authentication_timeout"
    assert done.completed_at == T0 + timedelta(seconds=TIMEOUT)
    intent = provider.provider_payments[intent_of(container, record)]
    assert (intent.status, intent.cancellation_reason) == ("canceled", "abandoned")
    cancels = [c for c in provider.calls if c.operation == "cancel"]
    assert [c.key for c in cancels] == [f"payorch-{record.id}-cancel-1"]
    assert provider.movements(record.id) == 0
    assert ledger_sum(container, record.id) == 0
    assert outbox_types(container, record.id) == ["payment.requires_action", "payment.canceled"]


def test_a_cancel_whose_outcome_was_lost_is_read_back_before_anything_is_resent(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    provider.fail("cancel", 1, "unknown_after_effect")
    record = three_ds_payment(container)
    run(container, record.id, record.lease_token)

    clock.tick(timedelta(seconds=TIMEOUT))
    for _ in range(5):
        if reload(container, record.id).status is not PaymentStatus.PROCESSING:
            break
        clock.tick(timedelta(seconds=60))
        sweep_and_run(container, publisher)

    done = reload(container, record.id)
    assert done.status is PaymentStatus.CANCELED
    assert done.failure is not None and done.failure.code == "authentication_timeout"
    operations = [c.operation for c in provider.calls]
    assert operations.count("cancel") == 1  # the retrieve proved it canceled: no resend
    assert operations[operations.index("cancel") + 1] == "retrieve"


def test_a_failed_authentication_fails_the_payment_with_the_providers_code(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = three_ds_payment(container)
    run(container, record.id, record.lease_token)

    provider.authenticate(intent_of(container, record), succeed=False)
    clock.tick(timedelta(seconds=RECHECK))
    assert sweep_and_run(container, publisher) == [ProcessResult.COMPLETED]

    done = reload(container, record.id)
    assert done.status is PaymentStatus.FAILED
    assert done.failure is not None
    assert done.failure.code == "payment_intent_authentication_failure"
    assert outbox_types(container, record.id) == ["payment.requires_action", "payment.failed"]


def test_off_session_with_a_card_that_needs_authentication_fails_at_once(
    container: Container, provider: FakeProvider, clock: FrozenDateTimeFactory
) -> None:
    record = three_ds_payment(container, off_session=True, return_url=None)

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    done = reload(container, record.id)
    assert done.status is PaymentStatus.FAILED
    assert done.failure is not None and done.failure.code == "authentication_required"
    assert outbox_types(container, record.id) == ["payment.failed"]
    (confirm,) = [c for c in provider.calls if c.operation == "confirm"]
    assert confirm.params == {"off_session": True}


def test_without_a_return_url_the_customer_is_asked_through_stripe_js(
    container: Container, clock: FrozenDateTimeFactory
) -> None:
    record = accept(container, new_merchant(container), "sdk", payment_method=THREE_DS)

    assert run(container, record.id, record.lease_token) is ProcessResult.WAITING

    shown = payment_representation(reload(container, record.id))
    assert shown["status"] == "requires_action"
    assert shown["next_action"]["type"] == "use_stripe_sdk"


# -- an event wakes a waiting payment ------------------------------------------------------


def event_arrives(container: Container, payment_id: str) -> bool:
    """What storing a provider event does to the payment it names (services.provider_events)."""
    with container.uow() as uow:
        woke = uow.provider_events.make_deferred_payment_due(payment_id, now=uow.now())
        uow.commit()
    return woke


def test_an_event_resumes_a_waiting_payment_at_the_next_sweep_not_at_the_recheck(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = three_ds_payment(container)
    run(container, record.id, record.lease_token)
    provider.authenticate(intent_of(container, record))

    clock.tick(timedelta(seconds=5))
    assert event_arrives(container, record.id)
    assert sweep_and_run(container, publisher) == [ProcessResult.COMPLETED]

    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
    assert provider.movements(record.id) == 1
    assert not event_arrives(container, record.id)  # finished: nothing to wake


def test_an_event_while_a_worker_holds_the_lease_ends_that_workers_wait_at_once(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = three_ds_payment(container)
    original_confirm = provider.confirm_payment

    def confirm_then_event(provider_payment_id: str, **kwargs: object) -> object:
        answer = original_confirm(provider_payment_id, **kwargs)  # type: ignore[arg-type]
        # The provider's event arrives before the worker wrote its wait.
        assert not event_arrives(container, record.id)
        return answer

    provider.confirm_payment = confirm_then_event  # type: ignore[method-assign,assignment]
    assert run(container, record.id, record.lease_token) is ProcessResult.WAITING

    waiting = reload(container, record.id)
    assert waiting.next_attempt_at == T0  # due now, not at the re-check
    assert waiting.woken_at is None
    assert sweep_and_run(container, publisher) == [ProcessResult.WAITING]
    assert reload(container, record.id).next_attempt_at == T0 + timedelta(seconds=RECHECK)


# -- processing at the provider: waits, never parks ----------------------------------------


def test_a_processing_intent_waits_without_parking_and_settles_on_a_recheck(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    record = accept(
        container, new_merchant(container), "async", payment_method="pm_card_sim_processingSucceeds"
    )
    assert run(container, record.id, record.lease_token) is ProcessResult.WAITING

    for _ in range(MAX_ATTEMPTS * 3):  # far more re-checks than MAX_ATTEMPTS
        clock.tick(timedelta(seconds=RECHECK))
        assert sweep_and_run(container, publisher) == [ProcessResult.WAITING]
        waiting = reload(container, record.id)
        assert waiting.status is PaymentStatus.PROCESSING
        assert waiting.waiting_for is WaitingFor.PROVIDER
        assert payment_representation(waiting)["status"] == "processing"
        assert payment_representation(waiting)["next_action"] is None

    provider.settle(intent_of(container, record))
    clock.tick(timedelta(seconds=RECHECK))
    assert sweep_and_run(container, publisher) == [ProcessResult.COMPLETED]
    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
    assert provider.movements(record.id) == 1


def test_operators_find_a_waiting_payment_as_requires_action_and_not_as_processing(
    container: Container, clock: FrozenDateTimeFactory
) -> None:
    waiting = three_ds_payment(container, "ops-3ds")
    run(container, waiting.id, waiting.lease_token)
    plain = accept(container, new_merchant(container, "other"), "ops-plain")  # not claimed yet

    def found(status: PaymentStatus) -> set[str]:
        with container.uow() as uow:
            return {r.id for r in uow.search.search(PaymentFilters(status=status), limit=50)}

    assert found(PaymentStatus.REQUIRES_ACTION) == {waiting.id}
    assert found(PaymentStatus.PROCESSING) == {plain.id}
