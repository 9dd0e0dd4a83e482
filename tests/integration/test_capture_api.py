"""Manual capture over real HTTP, on SQLite and PostgreSQL: ``capture_method`` on
``POST /v1/payments``, then ``/capture`` and ``/cancel`` (202 + Location, replays, 409 from a
status where they are not allowed, 400 over what is capturable)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, Role
from orchestrator.engine.kinds import process_operation
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.refunds import operation_count
from tests.harness.seeds import reload
from tests.harness.server import ServerThread


@dataclass
class Api:
    container: Container
    url: str
    publisher: RecordingPublisher
    provider: FakeProvider
    merchant: ApiClient
    key: str
    other_key: str

    def client(self, api_key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key or self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def run_published(self) -> None:
        """What a worker would do with every published task (charges and operations)."""
        runner = self.container.runner()
        for record_id, token in list(self.publisher.published):
            if record_id.startswith("pay_"):
                process_payment(runner, record_id, token, sleep=lambda _s: None)
            else:
                process_operation(runner, record_id, token, sleep=lambda _s: None)
        self.publisher.published.clear()

    def authorized(self, client: httpx.Client, amount: int = 1000) -> str:
        """A manual-capture payment, charged: requires_capture."""
        response = pay(client, amount, capture_method="manual")
        assert response.status_code == 202, response.text
        self.run_published()
        payment_id: str = response.json()["id"]
        assert client.get(f"/v1/payments/{payment_id}").json()["status"] == "requires_capture"
        return payment_id


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('captures') / 'payorch.sqlite3'}"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    publisher = RecordingPublisher()
    provider = FakeProvider()
    container = build_container(
        url, publisher=publisher, provider=provider, db_pool_size=30, db_max_overflow=30
    )
    first = create_client(container.uow, "a", Role.MERCHANT)
    other = create_client(container.uow, "b", Role.MERCHANT)
    with ServerThread(create_app(container)) as server:
        yield Api(
            container, server.url, publisher, provider, first.client, first.api_key, other.api_key
        )
    container.close()


def pay(client: httpx.Client, amount: int, **fields: object) -> httpx.Response:
    body = {"amount": amount, "currency": "usd", "payment_method": "pm_card_visa", **fields}
    return client.post(
        "/v1/payments", json=body, headers={"Idempotency-Key": f"pay-{random.getrandbits(64):x}"}
    )


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, object] = response.json()
    assert str(problem["type"]).endswith(slug), problem
    return problem


def test_a_manual_payment_is_accepted_and_reads_requires_capture_with_its_amounts(api):
    with api.client() as client:
        accepted = pay(client, 1500, capture_method="manual")
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        assert (body["status"], body["capture_method"]) == ("processing", "manual")
        assert (body["amount_capturable"], body["amount_captured"], body["amount_refunded"]) == (
            0,
            0,
            0,
        )
        api.run_published()

        read = client.get(f"/v1/payments/{body['id']}")
        shown = read.json()
        assert shown["status"] == "requires_capture"
        assert (shown["amount_capturable"], shown["amount_captured"]) == (1500, 0)
        assert "Retry-After" not in read.headers


def test_an_unknown_capture_method_is_400_and_automatic_is_the_default(api):
    with api.client() as client:
        assert_problem(pay(client, 1000, capture_method="later"), 400, "invalid-request")
        automatic = pay(client, 1000)
        assert automatic.json()["capture_method"] == "automatic"
    api.publisher.published.clear()


def post(client: httpx.Client, payment_id: str, action: str, key: str, body: object = None):
    # Keys are per client: the payment's id in them keeps the module's tests apart.
    return client.post(
        f"/v1/payments/{payment_id}/{action}",
        json=body,
        headers={"Idempotency-Key": f"{payment_id}-{key}"},
    )


def test_a_capture_answers_202_with_the_payment_and_its_replay_200_once_finished(api):
    with api.client() as client:
        payment_id = api.authorized(client, 1000)
        accepted = post(client, payment_id, "capture", "c-1", {"amount": 600})
        assert accepted.status_code == 202, accepted.text
        assert accepted.headers["Location"] == f"/v1/payments/{payment_id}"
        assert "Retry-After" in accepted.headers
        body = accepted.json()
        assert (body["object"], body["id"], body["status"]) == (
            "payment",
            payment_id,
            "requires_capture",
        )
        again = post(client, payment_id, "capture", "c-1", {"amount": 600})
        assert again.status_code == 202 and again.content == accepted.content
        assert again.headers["Idempotent-Replayed"] == "true"

        api.run_published()

        read = client.get(f"/v1/payments/{payment_id}").json()
        assert (read["status"], read["amount_captured"], read["amount_capturable"]) == (
            "succeeded",
            600,
            0,
        )
        replay = post(client, payment_id, "capture", "c-1", {"amount": 600})
        assert replay.status_code == 200, replay.text
        assert replay.json()["status"] == "succeeded"
        assert_problem(
            post(client, payment_id, "capture", "c-1", {"amount": 500}),
            422,
            "idempotency-key-reused",
        )
        # Captured: neither a second capture nor a cancel.
        assert_problem(post(client, payment_id, "capture", "c-2"), 409, "payment-not-capturable")
        assert_problem(post(client, payment_id, "cancel", "x-1"), 409, "payment-not-cancelable")


def test_a_capture_over_what_is_capturable_is_400_and_of_a_busy_payment_409(api):
    with api.client() as client:
        payment_id = api.authorized(client, 1000)
        over = assert_problem(
            post(client, payment_id, "capture", "c-1", {"amount": 1001}),
            400,
            "capture-exceeds-capturable",
        )
        assert over["amount_capturable"] == 1000 and "1000" in str(over["detail"])
        assert post(client, payment_id, "capture", "c-2", {}).status_code == 202
        busy = assert_problem(
            post(client, payment_id, "cancel", "x-1"), 409, "operation-in-progress"
        )
        assert str(busy["operation_id"]).startswith("cap_")
        for bad in ({"amount": 0}, {"amount": "10"}, {"extra": 1}):
            assert_problem(post(client, payment_id, "capture", "c-3", bad), 400, "invalid-request")
        assert_problem(
            post(client, payment_id, "cancel", "x-2", {"reason": "why"}), 400, "invalid-request"
        )
    api.run_published()


def test_a_cancel_releases_the_authorisation_and_reads_canceled(api):
    with api.client() as client:
        payment_id = api.authorized(client, 700)
        accepted = post(client, payment_id, "cancel", "x-1", {"reason": "requested_by_customer"})
        assert accepted.status_code == 202, accepted.text
        assert accepted.headers["Location"] == f"/v1/payments/{payment_id}"
        api.run_published()
        read = client.get(f"/v1/payments/{payment_id}").json()
        assert (read["status"], read["amount_capturable"], read["failure"]["code"]) == (
            "canceled",
            0,
            "canceled",
        )
        assert_problem(post(client, payment_id, "capture", "c-1"), 409, "payment-not-capturable")


def test_capture_and_cancel_of_a_payment_still_processing_or_of_another_client(api):
    with api.client() as client:
        automatic = pay(client, 1000).json()["id"]
        api.run_published()
        problem = assert_problem(
            post(client, automatic, "capture", "c-1"), 409, "payment-not-capturable"
        )
        assert problem["payment_status"] == "succeeded"
        payment_id = api.authorized(client, 1000)
    with api.client(api.other_key) as other:
        assert_problem(post(other, payment_id, "capture", "c-1"), 404, "not-found")
        assert_problem(post(other, payment_id, "cancel", "x-1"), 404, "not-found")
        assert_problem(post(other, "pay_nope", "cancel", "x-1"), 404, "not-found")


def test_concurrent_captures_and_cancels_with_distinct_keys_start_exactly_one_operation(api):
    with api.client() as client:
        payment_id = api.authorized(client, 1000)
    senders = 20

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
        async with httpx.AsyncClient(
            base_url=api.url,
            headers={"Authorization": f"Bearer {api.key}"},
            timeout=60,
            limits=limits,
            trust_env=False,
        ) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        f"/v1/payments/{payment_id}/{'cancel' if n % 2 else 'capture'}",
                        json={},
                        headers={"Idempotency-Key": f"storm-{n}"},
                    )
                    for n in range(senders)
                )
            )

    responses = asyncio.run(storm())

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] + [409] * (senders - 1), {r.status_code: r.text for r in responses}
    for response in responses:
        if response.status_code == 409:
            assert response.json()["type"].endswith("operation-in-progress")
    assert operation_count(api.container, payment_id) == 1
    api.run_published()
    final = reload(api.container, payment_id)
    assert final.status.value in ("succeeded", "canceled")
    assert sum(api.provider.captures.values()) <= len(api.provider.captures)  # never twice
