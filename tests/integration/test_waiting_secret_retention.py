"""A payment's client secret does not outlive the customer's wait (issue 43): the copy in
its ``payment.requires_action`` event is shown while the payment requires action, and no
longer once the wait ended, in every place an event is read: ``GET /v1/events`` (list and
one), the ops event view, the console's payment detail, and a webhook delivery retried
after the wait."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from orchestrator.bootstrap import Container
from orchestrator.db.clock import FrozenClock
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.events.event_reads import get_event, list_events
from orchestrator.ops.events import event_deliveries
from orchestrator.ops.payment_reads import get_payment_detail
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RECHECK = 300


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
    built = build_container(
        database_url,
        provider=provider,
        publisher=publisher,
        clock=FrozenClock(),
        action_recheck_seconds=RECHECK,
    )
    yield built
    built.close()


@pytest.fixture
def clock(container: Container) -> Iterator[FrozenDateTimeFactory]:
    with freeze_time(T0) as frozen:
        yield frozen


def _run(container: Container, payment_id: str, token: int) -> None:
    process_payment(
        container.runner(),
        payment_id,
        token,
        owner="test-worker",
        sleep=lambda _: None,
        rng=random.Random(7),
    )


def _secrets_shown(container: Container, client: ApiClient, record: PaymentRecord) -> list:
    """The requires_action event's client_secret, as each reader shows it."""
    [listed] = [
        e
        for e in list_events(container.uow, client.id, after=None, event_type=None, limit=10).events
        if e.event_type == "payment.requires_action"
    ]
    one = get_event(container.uow, listed.public_id, client_id=client.id)
    assert one is not None
    ops = event_deliveries(container.uow, listed.public_id).event
    detail = get_payment_detail(container.read_only_uow, record.id)
    assert detail is not None
    [in_detail] = [e for e in detail.events if e.event_type == "payment.requires_action"]
    return [event.payload["client_secret"] for event in (listed, one, ops, in_detail)]


def test_the_events_copy_of_the_client_secret_is_shown_only_while_the_wait_lasts(
    container: Container,
    provider: FakeProvider,
    publisher: RecordingPublisher,
    clock: FrozenDateTimeFactory,
) -> None:
    client = new_merchant(container)
    record = accept(
        container,
        client,
        "3ds",
        payment_method="pm_card_threeDSecure2Required",
        off_session=False,
        return_url="https://shop.example/back",
    )
    _run(container, record.id, record.lease_token)
    waiting = reload(container, record.id)
    assert waiting.requires_action and waiting.client_secret

    assert _secrets_shown(container, client, record) == [waiting.client_secret] * 4

    assert waiting.provider_payment_id is not None
    provider.authenticate(waiting.provider_payment_id)
    clock.tick(timedelta(seconds=RECHECK))
    publisher.published.clear()
    container.sweeper().run_once()
    for payment_id, token in list(publisher.published):
        _run(container, payment_id, token)
    assert not reload(container, record.id).requires_action

    assert _secrets_shown(container, client, record) == [None] * 4
