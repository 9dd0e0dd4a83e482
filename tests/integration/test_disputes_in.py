"""Disputes reported by the provider: the simulator's dashboard opens a dispute, its signed
``charge.dispute.created`` webhook reaches the API, and the dispute is recorded once,
shown on the ops payment page and announced to the merchant as ``payment.disputed``."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from devtools.simulator.webhooks import signature_header
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import outbox_events, provider_events
from orchestrator.domain.model import Role
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, new_merchant, reload
from tests.harness.server import ServerThread
from tests.integration.simulator_helpers import make_provider

SECRET = "whsec_payorch_disputes_in_tests"
PATH = "/v1/providers/stripe/webhooks"
DEADLINE_SECONDS = 15.0


@dataclass
class Api:
    url: str
    container: Container
    simulator: RunningSimulator
    ops_key: str


@pytest.fixture(params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('disputes')}/payorch.sqlite3"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    with start_in_thread(SimulatorConfig()) as simulator:
        provider = make_provider(simulator.url)
        container = build_container(url, provider=provider, stripe_webhook_secret=SECRET)
        ops_key = create_client(container.uow, "ops", Role.OPS).api_key
        with ServerThread(create_app(container)) as server:
            simulator.admin.configure_webhooks(server.url + PATH, SECRET)
            yield Api(server.url, container, simulator, ops_key)
        container.close()
        provider.close()


def succeeded_payment(api: Api, key: str) -> tuple[str, str]:
    record = accept(api.container, new_merchant(api.container, f"m-{key}"), key)
    result = process_payment(
        api.container.runner(),
        record.id,
        record.lease_token,
        sleep=lambda _: None,
        rng=random.Random(1),
    )
    assert result is ProcessResult.COMPLETED
    done = reload(api.container, record.id)
    assert done.provider_payment_id is not None
    return record.id, done.provider_payment_id


def outbox(api: Api, payment_id: str) -> list[str]:
    query = (
        sa.select(outbox_events.c.event_type)
        .where(outbox_events.c.payment_id == payment_id)
        .order_by(outbox_events.c.id)
    )
    with api.container.engine.connect() as conn:
        return list(conn.execute(query).scalars())


def disputes_of(api: Api, payment_id: str) -> list[dict[str, object]]:
    with httpx.Client(base_url=api.url, trust_env=False) as client:
        response = client.get(
            f"/v1/ops/payments/{payment_id}", headers={"Authorization": f"Bearer {api.ops_key}"}
        )
    assert response.status_code == 200, response.text
    disputes: list[dict[str, object]] = response.json()["disputes"]
    return disputes


def wait_for_disputes(api: Api, payment_id: str) -> list[dict[str, object]]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        disputes = disputes_of(api, payment_id)
        if disputes:
            return disputes
        assert time.monotonic() < deadline, "the dispute never arrived"
        time.sleep(0.05)


def test_a_dispute_is_recorded_shown_to_ops_and_announced_once(api: Api) -> None:
    payment_id, provider_payment_id = succeeded_payment(api, "disputed")

    opened = api.simulator.admin.open_dispute(provider_payment_id, reason="fraudulent")
    [dispute] = wait_for_disputes(api, payment_id)

    assert dispute["id"] == opened["id"]
    assert (dispute["amount"], dispute["currency"]) == (1000, "usd")
    assert (dispute["reason"], dispute["status"]) == ("fraudulent", opened["status"])
    assert outbox(api, payment_id) == ["payment.succeeded", "payment.disputed"]
    # No money state derives from a dispute: the payment itself is unchanged.
    assert reload(api.container, payment_id).status.value == "succeeded"


def test_a_replayed_dispute_event_announces_nothing_twice(api: Api) -> None:
    payment_id, provider_payment_id = succeeded_payment(api, "disputed-twice")
    api.simulator.admin.open_dispute(provider_payment_id)
    wait_for_disputes(api, payment_id)
    with api.container.engine.connect() as conn:
        payload = conn.execute(
            sa.select(provider_events.c.payload).where(
                provider_events.c.payment_id == payment_id,
                provider_events.c.type == "charge.dispute.created",
            )
        ).scalar_one()

    body = json.dumps(payload).encode()
    response = httpx.post(
        api.url + PATH,
        content=body,
        headers={
            "Stripe-Signature": signature_header(body, SECRET, int(time.time())),
            "Content-Type": "application/json",
        },
        trust_env=False,
    )

    assert response.status_code == 200 and response.json()["duplicate"] is True
    assert len(disputes_of(api, payment_id)) == 1
    assert outbox(api, payment_id).count("payment.disputed") == 1


def test_a_late_older_dispute_event_never_overwrites_a_newer_status(database_url: str) -> None:
    container = build_container(database_url)
    try:
        payment = accept(container, new_merchant(container), "dispute-order")

        def record(status: str, created: int) -> tuple[str, bool]:
            with container.uow() as uow:
                dispute, new = uow.disputes.record(
                    dispute_id="dp_order",
                    payment_id=payment.id,
                    provider_payment_id=None,
                    amount=1000,
                    currency="usd",
                    reason="fraudulent",
                    status=status,
                    event_created=created,
                    now=uow.now(),
                )
                uow.commit()
            return dispute.status, new

        assert record("under_review", 200) == ("under_review", True)
        assert record("needs_response", 100) == ("under_review", False)  # older: ignored
        assert record("lost", 300) == ("lost", False)
    finally:
        container.close()
