"""The refunds API over real HTTP, on SQLite and PostgreSQL.

The storm is the contract's acceptance: 50 concurrent refund requests with distinct keys
against one payment produce exactly as many refunds as fit, and every other answer is
``409 refund-exceeds-captured`` with nothing stored (PostgreSQL: real concurrency)."""

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
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.refunds import operation_count, succeeded_payment
from tests.harness.seeds import accept, reload
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

    def paid(self, amount: int = 1000) -> str:
        key = f"order-{random.getrandbits(64):x}"
        return succeeded_payment(self.container, self.merchant, key, amount=amount).id

    def run_published(self) -> None:
        """What a worker would do with every published operation."""
        runner = self.container.runner()
        for operation_id, token in list(self.publisher.published):
            if not operation_id.startswith("pay_"):
                process_operation(runner, operation_id, token, sleep=lambda _s: None)
        self.publisher.published.clear()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('refunds') / 'payorch.sqlite3'}"
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


def refund(client: httpx.Client, payment_id: str, key: str, body: object) -> httpx.Response:
    # Keys are per client: the payment's id in them keeps the module's tests apart.
    return client.post(
        f"/v1/payments/{payment_id}/refunds",
        json=body,
        headers={"Idempotency-Key": f"{payment_id}-{key}"},
    )


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, object] = response.json()
    assert str(problem["type"]).endswith(slug), problem
    return problem


def test_a_refund_is_accepted_with_202_and_location_and_reads_as_succeeded_once_run(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        accepted = refund(client, payment_id, "r-1", {"amount": 250, "reason": "duplicate"})
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        assert body["object"] == "refund" and body["status"] == "processing"
        assert (body["amount"], body["currency"], body["payment_id"]) == (250, "usd", payment_id)
        assert body["origin"] == "payorch" and body["reason"] == "duplicate"
        location = accepted.headers["Location"]
        assert location == f"/v1/refunds/{body['id']}"

        api.run_published()

        read = client.get(location)
        assert read.status_code == 200 and read.json()["status"] == "succeeded"
        assert read.json()["provider_refund_id"].startswith("re_")
        assert (
            client.get(location, headers={"If-None-Match": read.headers["ETag"]}).status_code == 304
        )
        listed = client.get(f"/v1/payments/{payment_id}/refunds").json()
        assert [r["id"] for r in listed["data"]] == [body["id"]] and listed["has_more"] is False

        replay = refund(client, payment_id, "r-1", {"amount": 250, "reason": "duplicate"})
        assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
        assert replay.content == read.content


def test_a_replay_while_processing_is_byte_for_byte_the_first_202(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        first = refund(client, payment_id, "r-1", {})
        again = refund(client, payment_id, "r-1", {})
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    api.publisher.published.clear()


def test_the_same_key_with_another_body_is_422_and_changes_nothing(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        assert refund(client, payment_id, "r-1", {"amount": 100}).status_code == 202
        assert_problem(
            refund(client, payment_id, "r-1", {"amount": 200}), 422, "idempotency-key-reused"
        )
    assert operation_count(api.container, payment_id) == 1
    api.publisher.published.clear()


def test_more_than_is_left_is_409_refund_exceeds_captured_with_nothing_stored(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        assert refund(client, payment_id, "r-1", {"amount": 800}).status_code == 202
        problem = assert_problem(
            refund(client, payment_id, "r-2", {"amount": 300}), 409, "refund-exceeds-captured"
        )
    assert problem["amount_refundable"] == 200
    assert "200" in str(problem["detail"])
    assert operation_count(api.container, payment_id) == 1
    api.publisher.published.clear()


def test_the_refusal_says_what_was_captured_and_refunded_and_names_no_pending_refund_when_none(
    api,
):
    payment_id = api.paid(1000)
    with api.client() as client:
        problem = assert_problem(
            refund(client, payment_id, "r-1", {"amount": 1500}), 409, "refund-exceeds-captured"
        )
    detail = problem["detail"]
    assert "captured 1000" in detail and "nothing refunded yet" in detail, detail
    assert "at most 1000 can be refunded" in detail, detail
    assert "progress" not in detail and "hold" not in detail, detail
    assert (problem["amount_refunded"], problem["amount_refund_pending"]) == (0, 0)
    assert operation_count(api.container, payment_id) == 0


def test_the_refusal_names_refunds_in_progress_then_refunded_money_as_it_moves(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        assert refund(client, payment_id, "r-1", {"amount": 800}).status_code == 202
        pending = assert_problem(
            refund(client, payment_id, "r-2", {"amount": 300}), 409, "refund-exceeds-captured"
        )
        api.run_published()  # the 800 succeeds at the provider
        refunded = assert_problem(
            refund(client, payment_id, "r-3", {"amount": 300}), 409, "refund-exceeds-captured"
        )
        assert refund(client, payment_id, "r-4", {"amount": 200}).status_code == 202
        api.run_published()
        spent = assert_problem(
            refund(client, payment_id, "r-5", {"amount": 1}), 409, "refund-exceeds-captured"
        )

    assert "800 held by refunds in progress" in pending["detail"], pending["detail"]
    assert "at most 200 can be refunded" in pending["detail"], pending["detail"]
    assert "800 refunded" in refunded["detail"], refunded["detail"]
    assert "progress" not in refunded["detail"], refunded["detail"]
    assert (refunded["amount_refunded"], refunded["amount_refund_pending"]) == (800, 0)
    assert "1000 refunded" in spent["detail"], spent["detail"]
    assert "nothing is left to refund" in spent["detail"], spent["detail"]
    assert spent["amount_refundable"] == 0


def test_a_payment_still_processing_is_409_payment_not_refundable(api):
    record = accept(api.container, api.merchant, f"order-{random.getrandbits(64):x}")
    with api.client() as client:
        assert_problem(refund(client, record.id, "r-1", {}), 409, "payment-not-refundable")
    assert operation_count(api.container, record.id) == 0
    api.publisher.published.clear()


def test_another_clients_payment_and_refund_are_not_found(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        refund_id = refund(client, payment_id, "r-1", {}).json()["id"]
    with api.client(api.other_key) as other:
        assert_problem(refund(other, payment_id, "r-1", {}), 404, "not-found")
        assert_problem(other.get(f"/v1/refunds/{refund_id}"), 404, "not-found")
        assert_problem(other.get(f"/v1/payments/{payment_id}/refunds"), 404, "not-found")
    api.publisher.published.clear()


def test_an_invalid_refund_body_is_400_and_stores_nothing(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        for body in ({"amount": 0}, {"amount": "10"}, {"reason": "because"}, {"extra": 1}):
            assert_problem(refund(client, payment_id, "r-x", body), 400, "invalid-request")
    assert operation_count(api.container, payment_id) == 0


def test_fifty_concurrent_refunds_with_distinct_keys_store_exactly_as_many_as_fit(api):
    payment_id = api.paid(1000)
    clients = 50

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
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
                        f"/v1/payments/{payment_id}/refunds",
                        json={"amount": 300},
                        headers={"Idempotency-Key": f"storm-{n}"},
                    )
                    for n in range(clients)
                )
            )

    responses = asyncio.run(storm())

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] * 3 + [409] * (clients - 3), {r.status_code: r.text for r in responses}
    for response in responses:
        if response.status_code == 409:
            assert response.json()["type"].endswith("refund-exceeds-captured")
    assert operation_count(api.container, payment_id) == 3
    paid = reload(api.container, payment_id)
    assert paid.amount_refund_reserved == 900
    api.run_published()
    assert reload(api.container, payment_id).amount_refunded == 900
    provider_payment_id = paid.provider_payment_id
    assert provider_payment_id is not None and api.provider.refunded(provider_payment_id) == 900


def test_a_refund_without_a_body_refunds_everything_that_is_left(api):
    payment_id = api.paid(1000)
    with api.client() as client:
        response = client.post(
            f"/v1/payments/{payment_id}/refunds", headers={"Idempotency-Key": f"{payment_id}-all"}
        )
        assert response.status_code == 202, response.text
        assert response.json()["amount"] == 1000
        text = client.post(
            f"/v1/payments/{payment_id}/refunds",
            content="amount=5",
            headers={"Idempotency-Key": f"{payment_id}-form", "Content-Type": "text/plain"},
        )
        assert_problem(text, 415, "unsupported-media-type")
    api.publisher.published.clear()
