"""``POST /v1/providers/stripe/webhooks`` over real HTTP on SQLite and PostgreSQL, fed by the
simulator's signed webhook deliveries (and by hand-made forgeries): verified through the
stripe SDK, stored once by event id, a hint that makes a deferred payment due and decides
nothing else."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from devtools.simulator.webhooks import signature_header
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import provider_events
from orchestrator.domain.model import Role
from orchestrator.providers.stripe_adapter import StripeProvider
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force, new_merchant, reload
from tests.harness.server import ServerThread
from tests.integration.simulator_helpers import make_provider, record_id

SECRET = "whsec_payorch_events_in_tests"
PATH = "/v1/providers/stripe/webhooks"
# A condition is polled this long at most (never a fixed sleep).
DEADLINE_SECONDS = 10.0


@dataclass
class Api:
    url: str
    container: Container


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('events-in')}/payorch.sqlite3"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    container = build_container(url, stripe_webhook_secret=SECRET)
    with ServerThread(create_app(container)) as server:
        yield Api(server.url, container)
    container.close()


@pytest.fixture
def simulator(api: Api) -> Iterator[RunningSimulator]:
    config = SimulatorConfig(webhook_url=api.url + PATH, webhook_secret=SECRET)
    with start_in_thread(config) as simulator:
        yield simulator


@pytest.fixture
def provider(simulator: RunningSimulator) -> Iterator[StripeProvider]:
    with make_provider(simulator.url) as provider:
        yield provider


def _stored(container: Container, *event_ids: str) -> list[dict[str, object]]:
    query = sa.select(provider_events)
    if event_ids:
        query = query.where(provider_events.c.id.in_(event_ids))
    with container.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query.order_by(provider_events.c.id))]


def _wait_until_stored(container: Container, event_ids: list[str]) -> list[dict[str, object]]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        rows = _stored(container, *event_ids)
        if len(rows) == len(event_ids):
            return rows
        assert time.monotonic() < deadline, f"stored {len(rows)} of {len(event_ids)} events"
        time.sleep(0.02)


def _paid(provider: StripeProvider) -> str:
    record = record_id()
    intent = provider.create_payment(
        record_id=record,
        amount=1000,
        currency="usd",
        payment_method="pm_card_visa",
        description=None,
        metadata={},
    )
    provider.confirm_payment(intent.id, record_id=record, attempt=1)
    return intent.id


def _event(
    event_id: str, provider_payment_id: str = "pi_forged", type_: str = "payment_intent.succeeded"
) -> bytes:
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "api_version": "2026-10-28.endive",
            "created": int(time.time()),
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": type_,
            "data": {"object": {"id": provider_payment_id, "object": "payment_intent"}},
        }
    ).encode()


def _post(api: Api, body: bytes, signature: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["Stripe-Signature"] = signature
    return httpx.post(api.url + PATH, content=body, headers=headers, timeout=10)


# -- delivered by the simulator ------------------------------------------------------------


def test_every_event_the_simulator_delivers_is_stored_once_with_what_it_names(
    api: Api, simulator: RunningSimulator, provider: StripeProvider
) -> None:
    provider_payment_id = _paid(provider)
    listed = provider.sdk.v1.events.list({"limit": 10}).data

    rows = _wait_until_stored(api.container, [e.id for e in listed])

    assert {r["type"] for r in rows} == {"payment_intent.created", "payment_intent.succeeded"}
    assert all(r["provider_payment_id"] == provider_payment_id for r in rows)
    assert all(r["object_type"] == "payment_intent" and r["provider"] == "stripe" for r in rows)
    assert all(r["payment_id"] is None for r in rows)  # not one of our payments
    deliveries = simulator.admin.webhook_deliveries()
    assert {d["status"] for d in deliveries} == {200}


def test_a_duplicated_delivery_is_answered_as_a_replay_and_stored_once(
    api: Api, simulator: RunningSimulator, provider: StripeProvider
) -> None:
    simulator.admin.add_fault("webhook:duplicate")

    _paid(provider)
    listed = [e.id for e in provider.sdk.v1.events.list({"limit": 10}).data]
    _wait_until_stored(api.container, listed)
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(simulator.admin.webhook_deliveries()) < 4:
        assert time.monotonic() < deadline, "the duplicates never arrived"
        time.sleep(0.02)

    assert len(_stored(api.container, *listed)) == 2
    assert [d["status"] for d in simulator.admin.webhook_deliveries()] == [200] * 4


# -- forgeries and mistakes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "signature",
    [
        None,
        "",
        "t=1,v1=00",
        "signed-by-someone",
    ],
)
def test_a_missing_or_wrong_signature_is_a_400_problem_and_nothing_is_stored(
    api: Api, signature: str | None
) -> None:
    event_id = f"evt_forged{time.monotonic_ns()}"

    response = _post(api, _event(event_id), signature)

    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "Stripe-Signature" in response.json()["detail"]
    assert _stored(api.container, event_id) == []


def test_an_event_signed_with_another_secret_or_too_long_ago_is_refused(api: Api) -> None:
    event_id = f"evt_forged{time.monotonic_ns()}"
    body = _event(event_id)

    other = _post(api, body, signature_header(body, "whsec_not_ours", int(time.time())))
    stale = _post(api, body, signature_header(body, SECRET, int(time.time()) - 3600))

    assert (other.status_code, stale.status_code) == (400, 400)
    assert _stored(api.container, event_id) == []


def test_a_correctly_signed_event_is_stored_and_its_replay_changes_nothing(api: Api) -> None:
    event_id = f"evt_signed{time.monotonic_ns()}"
    body = _event(event_id)

    first = _post(api, body, signature_header(body, SECRET, int(time.time())))
    again = _post(api, body, signature_header(body, SECRET, int(time.time())))

    assert first.status_code == 200
    assert first.json() == {"received": True, "id": event_id, "duplicate": False}
    assert again.json() == {"received": True, "id": event_id, "duplicate": True}
    [row] = _stored(api.container, event_id)
    assert row["type"] == "payment_intent.succeeded"
    assert row["payload"]["id"] == event_id


def test_a_body_larger_than_any_event_is_413(api: Api) -> None:
    body = b"{" + b" " * (300 * 1024) + b"}"

    response = _post(api, body, signature_header(body, SECRET, int(time.time())))

    assert response.status_code == 413


def test_without_a_configured_secret_the_route_accepts_nothing(tmp_path) -> None:
    container = build_container(f"sqlite:///{tmp_path}/no-secret.sqlite3")
    body = _event("evt_unverifiable")
    with ServerThread(create_app(container)) as server:
        response = httpx.post(
            server.url + PATH,
            content=body,
            headers={"Stripe-Signature": signature_header(body, SECRET, int(time.time()))},
            timeout=10,
        )
    try:
        assert response.status_code == 503
        assert "PAYORCH_STRIPE_WEBHOOK_SECRET" in response.json()["detail"]
        assert _stored(container) == []
    finally:
        container.close()


# -- a hint, never the truth ------------------------------------------------------------------


def _signed_post_about(api: Api, provider_payment_id: str) -> httpx.Response:
    body = _event(f"evt_hint{time.monotonic_ns()}", provider_payment_id)
    return _post(api, body, signature_header(body, SECRET, int(time.time())))


def test_an_event_about_a_deferred_payment_makes_it_due_and_changes_nothing_else(
    api: Api,
) -> None:
    merchant = new_merchant(api.container, f"m-{record_id()}")
    payment = accept(api.container, merchant, record_id())
    provider_payment_id = f"pi_deferred{time.monotonic_ns()}"
    with api.container.uow() as uow:
        later = uow.now() + timedelta(minutes=10)
    deferred = force(
        api.container,
        payment.id,
        provider_payment_id=provider_payment_id,
        lease_owner=None,
        locked_until=later,
        next_attempt_at=later,
    )

    response = _signed_post_about(api, provider_payment_id)

    after = reload(api.container, payment.id)
    assert response.status_code == 200
    assert after.next_attempt_at is not None and after.next_attempt_at < later
    assert after.locked_until is not None and after.locked_until < later
    assert (after.status, after.lease_token, after.recovery_point) == (
        deferred.status,
        deferred.lease_token,
        deferred.recovery_point,
    )
    [row] = [r for r in _stored(api.container) if r["provider_payment_id"] == provider_payment_id]
    assert (row["payment_id"], row["woke_payment"]) == (payment.id, True)


def test_an_event_never_touches_the_lease_of_a_payment_a_worker_holds_it_only_notes_it(
    api: Api,
) -> None:
    merchant = new_merchant(api.container, f"m-{record_id()}")
    payment = accept(api.container, merchant, record_id())
    provider_payment_id = f"pi_held{time.monotonic_ns()}"
    with api.container.uow() as uow:
        later = uow.now() + timedelta(minutes=1)
    held = force(
        api.container,
        payment.id,
        provider_payment_id=provider_payment_id,
        lease_owner="worker-1",
        locked_until=later,
        next_attempt_at=None,
    )

    response = _signed_post_about(api, provider_payment_id)

    assert response.status_code == 200
    after = reload(api.container, payment.id)
    # Only woken_at: the holder's wait (if it writes one) then ends at once.
    assert after.woken_at is not None
    assert replace(after, woken_at=None) == held
    [row] = [r for r in _stored(api.container) if r["provider_payment_id"] == provider_payment_id]
    assert (row["payment_id"], row["woke_payment"]) == (payment.id, False)


def test_one_event_delivered_many_times_at_once_is_stored_once(api: Api) -> None:
    event_id = f"evt_concurrent{time.monotonic_ns()}"
    body = _event(event_id)
    answers: list[dict[str, object]] = []
    lock = threading.Lock()

    def deliver() -> None:
        response = _post(api, body, signature_header(body, SECRET, int(time.time())))
        assert response.status_code == 200
        with lock:
            answers.append(response.json())

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(answers) == 8
    assert [a["duplicate"] for a in answers].count(False) == 1
    assert len(_stored(api.container, event_id)) == 1


def test_an_event_of_a_type_payorch_does_not_handle_is_stored_and_ignored(api: Api) -> None:
    event_id = f"evt_other{time.monotonic_ns()}"
    body = json.dumps(
        {
            "id": event_id,
            "object": "event",
            "api_version": "2026-10-28.endive",
            "created": int(time.time()),
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": "customer.created",
            "data": {"object": {"id": "cus_123", "object": "customer"}},
        }
    ).encode()

    response = _post(api, body, signature_header(body, SECRET, int(time.time())))

    assert response.status_code == 200
    [row] = _stored(api.container, event_id)
    assert (row["type"], row["object_type"], row["object_id"]) == (
        "customer.created",
        "customer",
        "cus_123",
    )
    assert (row["provider_payment_id"], row["payment_id"], row["woke_payment"]) == (
        None,
        None,
        False,
    )


def test_the_operators_payment_page_lists_the_events_about_the_payment(api: Api) -> None:
    merchant = new_merchant(api.container, f"m-{record_id()}")
    payment = accept(api.container, merchant, record_id())
    provider_payment_id = f"pi_shown{time.monotonic_ns()}"
    force(api.container, payment.id, provider_payment_id=provider_payment_id)
    ops_key = create_client(api.container.uow, f"ops-{record_id()}", Role.OPS).api_key
    first, second = (_signed_post_about(api, provider_payment_id) for _ in range(2))

    detail = httpx.get(
        f"{api.url}/v1/ops/payments/{payment.id}",
        headers={"Authorization": f"Bearer {ops_key}"},
        timeout=10,
    )

    assert detail.status_code == 200, detail.text
    shown = detail.json()["provider_events"]
    assert [e["id"] for e in shown] == [first.json()["id"], second.json()["id"]]
    assert shown[0]["type"] == "payment_intent.succeeded"
    assert (shown[0]["object_type"], shown[0]["object_id"]) == (
        "payment_intent",
        provider_payment_id,
    )
