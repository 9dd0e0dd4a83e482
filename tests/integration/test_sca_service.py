"""Issue 12's charge side as a service, on a real database, with the scripted fake
provider: the Part 2 request fields reach the provider, authentication waits without a
lease, and the re-check and the timeout run in frozen time (the DB clock seam)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def container(database_url: str, provider: FakeProvider) -> Iterator[Container]:
    built = build_container(database_url, provider=provider, max_attempts=3)
    yield built
    built.close()


def run(container: Container, payment_id: str, token: int) -> ProcessResult:
    return process_payment(
        container.runner(),
        payment_id,
        token,
        owner="test-worker",
        sleep=lambda _: None,
        rng=random.Random(7),
    )


def test_the_customer_goes_on_the_create_and_off_session_and_return_url_on_the_confirm(
    container: Container, provider: FakeProvider
) -> None:
    record = accept(
        container,
        new_merchant(container),
        "saved-card",
        customer="cus_Saved1",
        off_session=False,
        return_url="https://shop.example/back",
    )

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    assert reload(container, record.id).status is PaymentStatus.SUCCEEDED
    create, confirm = provider.calls
    assert create.params == {"customer": "cus_Saved1"}
    assert confirm.params == {"off_session": False, "return_url": "https://shop.example/back"}
    assert provider.intents[create_intent_id(provider)].customer == "cus_Saved1"


def test_a_payment_without_the_new_fields_sends_none_of_them(
    container: Container, provider: FakeProvider
) -> None:
    record = accept(container, new_merchant(container), "plain")

    assert run(container, record.id, record.lease_token) is ProcessResult.COMPLETED

    assert [call.params for call in provider.calls] == [{}, {}]


def create_intent_id(provider: FakeProvider) -> str:
    (intent_id,) = provider.intents
    return intent_id
