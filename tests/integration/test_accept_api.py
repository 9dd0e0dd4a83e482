"""The accept API over real HTTP (uvicorn) on SQLite and PostgreSQL (issue 2's acceptance)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
import sqlalchemy as sa

from orchestrator import metrics
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.dispatcher import start_in_thread as start_dispatcher
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.services.api_keys import create_client, revoke_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.server import ServerThread

BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}


@dataclass
class Api:
    container: Container
    url: str
    publisher: RecordingPublisher
    provider: FakeProvider
    key_a: str
    key_b: str
    ops_key: str

    def client(self, api_key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key or self.key_a}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def count(self, **where: str) -> int:
        query = sa.select(sa.func.count()).select_from(payments)
        for column, value in where.items():
            query = query.where(payments.c[column] == value)
        with self.container.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())


@pytest.fixture(scope="module", params=["sqlite", "postgres", "postgres-publish"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """SQLite (the API publishes), PostgreSQL as deployed (NOTIFY, and a dispatcher
    publishing into the recording publisher), PostgreSQL with PAYORCH_WAKE_UP=publish."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'payorch.sqlite3'}"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    wake_up = "notify" if request.param == "postgres" else "publish"
    publisher = RecordingPublisher()
    provider = FakeProvider()
    container = build_container(
        url,
        publisher=publisher,
        provider=provider,
        db_pool_size=20,
        db_max_overflow=10,
        wake_up=wake_up,
    )
    keys = [create_client(container.uow, name, Role.MERCHANT).api_key for name in ("a", "b")]
    ops_key = create_client(container.uow, "ops", Role.OPS).api_key
    stop = threading.Event()
    thread = None
    if wake_up == "notify":
        dispatcher, thread = start_dispatcher(
            url,
            publisher,
            name="accept-tests",
            stop=stop,
            circuit_hold=CircuitHold.of(container.settings),
        )
        assert dispatcher.listening.wait(60)
    try:
        with ServerThread(create_app(container)) as server:
            yield Api(container, server.url, publisher, provider, keys[0], keys[1], ops_key)
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=10)
        container.close()


def post(
    client: httpx.Client, key: str | None, body: object = BODY, **kw: object
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    if isinstance(body, bytes | str):
        headers["Content-Type"] = "application/json"
        return client.post("/v1/payments", content=body, headers=headers, **kw)  # type: ignore[arg-type]
    return client.post("/v1/payments", json=body, headers=headers, **kw)  # type: ignore[arg-type]


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/" + slug)
    assert problem["status"] == status
    assert problem["title"] and problem["detail"]
    assert "Traceback" not in response.text
    return problem


@pytest.mark.parametrize("clients", [20, 200])
def test_concurrent_identical_posts_make_exactly_one_record(api: Api, clients: int) -> None:
    key = f"storm-{clients}"

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(
            base_url=api.url,
            headers={"Authorization": f"Bearer {api.key_a}"},
            timeout=60,
            limits=limits,
            trust_env=False,
        ) as client:
            return await asyncio.gather(
                *(
                    client.post("/v1/payments", json=BODY, headers={"Idempotency-Key": key})
                    for _ in range(clients)
                )
            )

    responses = asyncio.run(storm())

    assert [r.status_code for r in responses] == [202] * clients, {
        r.status_code: r.text for r in responses
    }
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
    assert replayed.count(None) == 1
    assert replayed.count("true") == clients - 1
    assert api.count(idempotency_key=key) == 1
    # One wake-up: published by the API after its commit, or by the dispatcher from the
    # one NOTIFY the one inserting statement sent (asynchronously: poll for it).
    [payment_id] = ids
    deadline = time.monotonic() + 60
    while payment_id not in {p[0] for p in api.publisher.published}:
        assert time.monotonic() < deadline, "no wake-up published"
        time.sleep(0.05)
    assert [p for p in api.publisher.published if p[0] == payment_id] == [(payment_id, 1)]


def test_new_key_answers_202_with_location_and_retry_after(api: Api) -> None:
    with api.client() as client:
        response = post(client, "new-key-1")
    assert response.status_code == 202
    body = response.json()
    assert response.headers["Location"] == f"/v1/payments/{body['id']}"
    assert int(response.headers["Retry-After"]) >= 1
    assert "Idempotent-Replayed" not in response.headers
    assert body["status"] == "processing"
    assert body["amount"] == 1999 and body["currency"] == "usd"
    assert body["idempotency_key"] == "new-key-1"


def test_same_key_with_another_amount_is_422_and_changes_nothing(api: Api) -> None:
    with api.client() as client:
        first = post(client, "reuse-1").json()
        problem = assert_problem(
            post(client, "reuse-1", {**BODY, "amount": 5000}), 422, "idempotency-key-reused"
        )
        after = client.get(f"/v1/payments/{first['id']}").json()
    assert problem["payment_id"] == first["id"]
    assert after["amount"] == 1999
    assert after["updated_at"] == first["updated_at"]
    assert api.count(idempotency_key="reuse-1") == 1


def test_the_same_key_from_another_client_is_an_independent_payment(api: Api) -> None:
    with api.client(api.key_a) as a, api.client(api.key_b) as b:
        first = post(a, "shared-key")
        second = post(b, "shared-key")
    assert first.status_code == second.status_code == 202
    assert "Idempotent-Replayed" not in second.headers
    assert first.json()["id"] != second.json()["id"]
    assert api.count(idempotency_key="shared-key") == 2


def test_reordered_fields_and_whitespace_are_the_same_request(api: Api) -> None:
    ordered = '{"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}'
    shuffled = '{ "payment_method":"pm_card_visa",\n "currency" : "USD", "amount":1999 }'
    with api.client() as client:
        first = post(client, "order-key", ordered)
        second = post(client, "order-key", shuffled)
    assert first.status_code == second.status_code == 202
    assert second.headers["Idempotent-Replayed"] == "true"
    assert first.json()["id"] == second.json()["id"]


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        (None, "missing"),
        ("", "empty"),
        ("k" * 256, "256 characters"),
        ("tab\tinside", "control character"),
    ],
)
def test_a_missing_or_malformed_key_is_400_and_stores_nothing(
    api: Api, key: str | None, reason: str
) -> None:
    before = api.count()
    with api.client() as client:
        assert_problem(post(client, key), 400, "invalid-idempotency-key")
    assert api.count() == before, reason


def test_a_key_of_255_printable_characters_is_accepted(api: Api) -> None:
    key = ("~ !" * 100)[:255]
    with api.client() as client:
        assert post(client, key).status_code == 202


def test_an_invalid_body_stores_nothing_so_the_fixed_body_may_reuse_the_key(api: Api) -> None:
    with api.client() as client:
        problem = assert_problem(
            post(client, "fix-me", {**BODY, "amount": 0}), 400, "invalid-request"
        )
        assert problem["errors"] == [
            {"field": "amount", "message": "Input should be greater than 0"}
        ]
        assert api.count(idempotency_key="fix-me") == 0
        fixed = post(client, "fix-me")
    assert fixed.status_code == 202
    assert "Idempotent-Replayed" not in fixed.headers


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "currency": "zzz"}, "currency"),
        ({**BODY, "amount": "1999"}, "amount"),
        ({**BODY, "amount": 19.99}, "amount"),
        ({**BODY, "surprise": 1}, "surprise"),
        ({k: v for k, v in BODY.items() if k != "payment_method"}, "payment_method"),
    ],
)
def test_invalid_fields_are_listed_in_the_problem(
    api: Api, body: dict[str, object], field: str
) -> None:
    with api.client() as client:
        problem = assert_problem(post(client, f"bad-field-{field}", body), 400, "invalid-request")
    assert field in [e["field"] for e in problem["errors"]]  # type: ignore[union-attr]


def test_a_body_that_is_not_json_is_400(api: Api) -> None:
    with api.client() as client:
        assert_problem(post(client, "not-json", b"amount=5"), 400, "invalid-request")


def test_a_body_over_64_kib_is_413(api: Api) -> None:
    body = {**BODY, "description": "x" * 70_000}
    with api.client() as client:
        assert_problem(post(client, "too-big", json.dumps(body)), 413, "payload-too-large")
    assert api.count(idempotency_key="too-big") == 0


def test_a_client_cannot_read_another_clients_payment(api: Api) -> None:
    with api.client(api.key_b) as b:
        theirs = post(b, "private").json()
    with api.client(api.key_a) as a:
        assert_problem(a.get(f"/v1/payments/{theirs['id']}"), 404, "not-found")
        assert a.get("/v1/payments", params={"idempotency_key": "private"}).json() == {
            "data": [],
            "has_more": False,
        }
    with api.client(api.key_b) as b:
        assert b.get(f"/v1/payments/{theirs['id']}").status_code == 200


def test_lookup_by_idempotency_key_returns_the_payment(api: Api) -> None:
    with api.client() as client:
        created = post(client, "lookup-me").json()
        found = client.get("/v1/payments", params={"idempotency_key": "lookup-me"})
    assert found.status_code == 200
    assert [p["id"] for p in found.json()["data"]] == [created["id"]]


def test_reading_a_processing_payment_carries_retry_after(api: Api) -> None:
    with api.client() as client:
        created = post(client, "poll-me").json()
        read = client.get(f"/v1/payments/{created['id']}")
    assert read.status_code == 200
    assert read.json()["status"] == "processing"
    assert int(read.headers["Retry-After"]) >= 1


@pytest.mark.parametrize("authorization", [None, "Bearer pok_unknown", "Basic abc", "Bearer"])
def test_a_missing_or_unknown_bearer_key_is_401(api: Api, authorization: str | None) -> None:
    headers = {"Idempotency-Key": "auth"} | (
        {"Authorization": authorization} if authorization else {}
    )
    with httpx.Client(base_url=api.url, trust_env=False) as client:
        response = client.post("/v1/payments", json=BODY, headers=headers)
        read = client.get("/v1/payments/pay_x", headers=headers)
    assert_problem(response, 401, "unauthorized")
    assert_problem(read, 401, "unauthorized")
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_an_ops_key_cannot_create_payments(api: Api) -> None:
    with api.client(api.ops_key) as client:
        assert_problem(post(client, "ops-pay"), 403, "forbidden")


def test_refused_keys_store_nothing_and_wake_nothing(api: Api) -> None:
    """On PostgreSQL the authentication and the claim are one statement: it must insert
    (and notify) nothing for an ops key, a revoked key or an unknown one."""
    revoked = create_client(api.container.uow, "revoked", Role.MERCHANT)
    revoke_client(api.container.uow, revoked.client.id)
    unknown = "pok_" + "x" * 43  # plausible: it reaches the database
    before = len(api.publisher.published)
    for key, status, slug in [
        (api.ops_key, 403, "forbidden"),
        (revoked.api_key, 401, "unauthorized"),
        (unknown, 401, "unauthorized"),
    ]:
        with api.client(key) as client:
            assert_problem(post(client, f"refused-{slug}-{status}"), status, slug)
        assert api.count(idempotency_key=f"refused-{slug}-{status}") == 0
    with api.client() as client:  # a payment after them
        accepted = post(client, "after-refused")
    assert accepted.status_code == 202
    payment_id = accepted.json()["id"]
    deadline = time.monotonic() + 60
    while payment_id not in {p[0] for p in api.publisher.published[before:]}:
        assert time.monotonic() < deadline, "no wake-up published"
        time.sleep(0.01)
    # Wake-ups arrive in commit order (NOTIFY) or request order: one for a refused request
    # would have come before this one, naming a payment that is not stored.
    woken = {p[0] for p in api.publisher.published[before:]}
    assert all(api.count(id=woken_id) == 1 for woken_id in woken), woken


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Idempotency-Key": "order"}, {**BODY, "amount": 0}),  # bad field
        ({"Idempotency-Key": "order"}, b"{not json"),  # bad JSON
        ({}, BODY),  # no Idempotency-Key
    ],
)
def test_the_key_is_refused_before_the_body_and_the_idempotency_key(
    api: Api, headers: dict[str, str], body: object
) -> None:
    """The declared route's order: 401/403 before 400, whichever path serves the request."""
    for api_key, status, slug in [
        (api.ops_key, 403, "forbidden"),
        ("pok_" + "y" * 43, 401, "unauthorized"),
    ]:
        with api.client(api_key) as client:
            if isinstance(body, bytes):
                sent = client.post(
                    "/v1/payments",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                )
            else:
                sent = client.post("/v1/payments", json=body, headers=headers)
        assert_problem(sent, status, slug)


def test_a_finished_payment_replays_as_200_with_the_stored_response(api: Api) -> None:
    with api.client() as client:
        created = post(client, "finish-me").json()
        record_token = 1
        process_payment(api.container.runner(), created["id"], record_token, owner="test")
        replay = post(client, "finish-me")
        read = client.get(f"/v1/payments/{created['id']}")
    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert "Retry-After" not in replay.headers
    assert replay.json()["status"] == "succeeded"
    assert replay.json() == read.json()


def test_unknown_routes_and_methods_are_problems(api: Api) -> None:
    with api.client() as client:
        assert_problem(client.get("/v1/nothing"), 404, "not-found")
        assert_problem(client.delete("/v1/payments"), 405, "method-not-allowed")


def test_openapi_declares_the_required_key_and_every_status(api: Api) -> None:
    with api.client() as client:
        # Building the whole document takes seconds on a loaded machine: a bound, not a goal.
        document = client.get("/openapi.json", timeout=60).json()
    operation = document["paths"]["/v1/payments"]["post"]
    [header] = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header" and header["required"] is True
    assert "24" in header["description"]  # the retention window
    assert {"200", "202", "400", "401", "403", "413", "415", "422", "503"} <= set(
        operation["responses"]
    )
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/PaymentCreate"
    )
    assert "PaymentCreate" in document["components"]["schemas"]


def test_health_and_readiness(api: Api) -> None:
    with api.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] is True


def test_a_broker_outage_during_accept_still_answers_202_with_a_durable_record(
    database_url: str, unused_port: int
) -> None:
    from orchestrator.broker import CeleryPublisher
    from tests.harness.containers import test_settings
    from workers.celery_app import create_celery_app

    # A real Celery publisher pointed at a port where no broker listens.
    dead_broker = f"amqp://guest:guest@127.0.0.1:{unused_port}//"
    celery = create_celery_app(test_settings(database_url, broker_url=dead_broker))
    container = build_container(
        database_url, publisher=CeleryPublisher(celery), broker_url=dead_broker
    )
    key = create_client(container.uow, "m", Role.MERCHANT).api_key
    try:
        with (
            ServerThread(create_app(container)) as server,
            httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {key}"}, trust_env=False
            ) as client,
        ):
            failures_before = _publish_failures()
            response = post(client, "broker-down")
            assert response.status_code == 202
            payment_id = response.json()["id"]
            assert _publish_failures() == failures_before + 1
            assert client.get("/readyz").status_code == 503
        with container.uow() as uow:
            record = uow.payments.get(payment_id)
        assert record is not None
        assert record.status.value == "processing" and record.locked_until is not None
    finally:
        container.close()


def test_under_notify_a_broker_outage_leaves_the_api_ready(
    make_postgres_database: Callable[[], str], unused_port: int
) -> None:
    """WAKE_UP=notify: an accept needs only the database (the dispatcher publishes), so a
    broker outage must not make a load balancer drop the API; the broker is still reported."""
    from orchestrator.broker import CeleryPublisher
    from tests.harness.containers import test_settings
    from workers.celery_app import create_celery_app

    url = make_postgres_database()
    dead_broker = f"amqp://guest:guest@127.0.0.1:{unused_port}//"
    celery = create_celery_app(test_settings(url, broker_url=dead_broker))
    container = build_container(
        url, publisher=CeleryPublisher(celery), broker_url=dead_broker, wake_up="notify"
    )
    try:
        with (
            ServerThread(create_app(container)) as server,
            httpx.Client(base_url=server.url, trust_env=False) as client,
        ):
            ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"] == {"database": True, "broker": False}
    finally:
        container.close()


def _publish_failures() -> float:
    # This process's API series, as ``payorch api --metrics-port`` serves them (the API
    # under test runs in this process).
    for line in metrics.render(metrics.Role.API)[0].decode().splitlines():
        if line.startswith("payorch_task_publish_failures_total "):
            return float(line.split()[1])
    raise AssertionError("publish failure counter missing from /metrics")


@pytest.fixture
def unused_port() -> int:
    from tests.harness.server import free_port

    return free_port()


SAVED_CARD = {
    **BODY,
    "customer": "cus_SavedCard42",
    "off_session": False,
    "return_url": "https://shop.example/checkout/done",
}


def test_customer_off_session_and_return_url_are_stored_and_shown(api: Api) -> None:
    with api.client() as client:
        response = post(client, "saved-card-1", SAVED_CARD)
        assert response.status_code == 202
        body = response.json()
        assert body["customer"] == "cus_SavedCard42"
        assert body["next_action"] is None and body["client_secret"] is None
        read = client.get(f"/v1/payments/{body['id']}").json()
    assert read["customer"] == "cus_SavedCard42"
    assert api.count(idempotency_key="saved-card-1", customer="cus_SavedCard42") == 1
    assert api.count(idempotency_key="saved-card-1", return_url=SAVED_CARD["return_url"]) == 1


def test_the_same_key_with_another_customer_is_422(api: Api) -> None:
    with api.client() as client:
        assert post(client, "saved-card-2", SAVED_CARD).status_code == 202
        assert_problem(
            post(client, "saved-card-2", {**SAVED_CARD, "customer": "cus_Other"}),
            422,
            "idempotency-key-reused",
        )
        assert post(client, "saved-card-2", SAVED_CARD).status_code == 202  # the replay


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "amount": 49}, "amount"),  # Stripe's USD minimum is 50
        ({**BODY, "amount": 29, "currency": "GBP"}, "amount"),
        ({**BODY, "off_session": False}, "return_url"),
        ({**BODY, "off_session": True, "return_url": "https://a.example/"}, "return_url"),
        ({**BODY, "customer": "someone"}, "customer"),
        ({**BODY, "return_url": "not a url"}, "return_url"),
        ({**BODY, "off_session": "false"}, "off_session"),
    ],
)
def test_new_fields_and_the_minimum_are_checked_before_anything_is_stored(
    api: Api, body: dict[str, object], field: str
) -> None:
    before = api.count()
    with api.client() as client:
        problem = assert_problem(post(client, "rule-check", body), 400, "invalid-request")
    assert [e["field"] for e in problem["errors"]] == [field]
    assert field in problem["detail"]
    assert api.count() == before
