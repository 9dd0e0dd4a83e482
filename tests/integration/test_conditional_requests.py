"""Replays byte for byte, ETag / If-None-Match for pollers, If-Match for operators (issue 18),
over real HTTP (uvicorn) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import httpx
import pytest

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import PaymentRecord, Role
from orchestrator.domain.payment_representation import PAYMENT_FIELDS, payment_representation
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import force, reload, settle_success
from tests.harness.server import ServerThread
from tests.integration.lease_helpers import expire_leases

LEASE_SECONDS = 60.0
# Keys in an order no sorting produces, so a body that echoes the request's order shows.
BODY = {
    "amount": 1999,
    "currency": "USD",
    "payment_method": "pm_card_visa",
    "description": "Café crème",
    "metadata": {"zeta": "1", "alpha": "2", "order_number": "1042"},
}


@dataclass
class Api:
    container: Container
    url: str
    publisher: RecordingPublisher
    merchant_key: str
    ops_key: str

    def merchant(self) -> httpx.Client:
        return self._client(self.merchant_key)

    def ops(self) -> httpx.Client:
        return self._client(self.ops_key)

    def _client(self, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
            trust_env=False,
        )

    def post(self, key: str, body: dict[str, Any] = BODY) -> httpx.Response:
        with self.merchant() as client:
            return client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})

    def get(self, payment_id: str, **headers: str) -> httpx.Response:
        with self.merchant() as client:
            return client.get(f"/v1/payments/{payment_id}", headers=headers)

    def claim(self, record: PaymentRecord) -> PaymentRecord:
        with self.container.uow() as uow:
            now = uow.now()
            claimed = uow.leases.claim(
                record.id,
                carried_token=record.lease_token,
                owner="worker-1",
                now=now,
                lease_until=now + timedelta(seconds=LEASE_SECONDS),
            )
            uow.commit()
        assert claimed is not None
        return claimed

    def renew(self, record: PaymentRecord) -> PaymentRecord:
        with self.container.uow() as uow:
            now = uow.now()
            renewed = uow.leases.renew(
                record.id,
                token=record.lease_token,
                now=now,
                lease_until=now + timedelta(seconds=2 * LEASE_SECONDS),
                next_confirm=True,
            )
            uow.commit()
        assert renewed is not None
        return renewed

    def audit(self, payment_id: str) -> list[dict[str, Any]]:
        with self.ops() as client:
            response = client.get("/v1/ops/audit", params={"payment_id": payment_id})
        assert response.status_code == 200, response.text
        data: list[dict[str, Any]] = response.json()["data"]
        return data


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('cond') / 'payorch.sqlite3'}"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    publisher = RecordingPublisher()
    container = build_container(
        url, publisher=publisher, provider=FakeProvider(), lease_seconds=LEASE_SECONDS
    )
    merchant_key = create_client(container.uow, "shop", Role.MERCHANT).api_key
    ops_key = create_client(container.uow, "oncall", Role.OPS).api_key
    try:
        with ServerThread(create_app(container)) as server:
            yield Api(container, server.url, publisher, merchant_key, ops_key)
    finally:
        container.close()


def record_of(api: Api, response: httpx.Response) -> PaymentRecord:
    return reload(api.container, response.json()["id"])


# -- replays, byte for byte -------------------------------------------------------------


def test_a_processing_replay_returns_the_first_202_bytes_although_the_record_moved(api):
    first = api.post("bytes-202")
    assert first.status_code == 202
    # A worker claims it: attempts and updated_at change, which the live representation
    # would show.  The replay is the answer of record, not a new rendering.
    api.renew(api.claim(record_of(api, first)))

    replays = [api.post("bytes-202") for _ in range(3)]

    for replay in replays:
        assert replay.status_code == 202
        assert replay.content == first.content
        assert replay.headers["Location"] == first.headers["Location"]
        assert replay.headers["Retry-After"] == first.headers["Retry-After"]
        assert replay.headers["Idempotent-Replayed"] == "true"
    assert api.get(first.json()["id"]).json()["attempts"] == 1


def test_a_finished_replay_returns_the_stored_final_bytes_and_so_does_get(api):
    first = api.post("bytes-200")
    process_payment(api.container.runner(), first.json()["id"], 1, owner="test")

    replays = [api.post("bytes-200") for _ in range(3)]
    read = api.get(first.json()["id"])

    assert {r.status_code for r in replays} == {200}
    assert {r.content for r in replays} == {read.content}
    assert replays[0].headers["Location"] == first.headers["Location"]
    assert replays[0].json()["status"] == "succeeded"
    stored = reload(api.container, first.json()["id"]).final_response
    assert stored == read.content


def test_every_body_has_one_key_order(api):
    first = api.post("one-order")
    read = api.get(first.json()["id"])
    process_payment(api.container.runner(), first.json()["id"], 1, owner="test")
    final = api.get(first.json()["id"])
    with api.merchant() as client:
        listed = client.get("/v1/payments", params={"idempotency_key": "one-order"})

    for body in (first.json(), read.json(), final.json(), listed.json()["data"][0]):
        assert tuple(body) == PAYMENT_FIELDS
        assert list(body["metadata"]) == ["alpha", "order_number", "zeta"]
    # The 202 and a GET of the same unchanged record are the same bytes.
    assert first.content == read.content


def test_a_payment_finished_before_the_migration_is_served_in_the_one_order(api):
    """Rows from before 0003 hold only the JSONB document (final_response NULL)."""
    first = api.post("legacy-finished")
    process_payment(api.container.runner(), first.json()["id"], 1, owner="test")
    record = reload(api.container, first.json()["id"])
    assert record.final_response is not None
    force(api.container, record.id, final_response=None, accepted_response=None)

    read = api.get(record.id)
    replay = api.post("legacy-finished")

    assert read.content == record.final_response
    assert replay.content == read.content and replay.status_code == 200


def test_an_unfinished_payment_from_before_the_migration_replays_its_representation(api):
    first = api.post("legacy-processing")
    force(api.container, first.json()["id"], accepted_response=None)
    replay = api.post("legacy-processing")
    assert replay.status_code == 202
    assert replay.content == first.content


# -- ETag and If-None-Match -------------------------------------------------------------


def test_get_carries_a_strong_etag_and_if_none_match_answers_304_without_a_body(api):
    payment_id = api.post("etag-304").json()["id"]
    read = api.get(payment_id)
    etag = read.headers["ETag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    assert api.get(payment_id).headers["ETag"] == etag

    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        cached = api.get(payment_id, **{"If-None-Match": header})
        assert cached.status_code == 304, header
        assert cached.content == b""
        assert cached.headers["ETag"] == etag
        assert cached.headers["Retry-After"] == read.headers["Retry-After"]

    for header in ('"other"', "not-a-tag"):
        full = api.get(payment_id, **{"If-None-Match": header})
        assert full.status_code == 200
        assert full.content == read.content


def test_the_etag_changes_with_every_change_and_not_with_a_heartbeat(api):
    payment_id = api.post("etag-changes").json()["id"]
    accepted = api.get(payment_id).headers["ETag"]

    claimed = api.claim(reload(api.container, payment_id))
    after_claim = api.get(payment_id)
    assert after_claim.headers["ETag"] != accepted

    api.renew(claimed)  # a heartbeat before a provider call
    after_renewal = api.get(payment_id, **{"If-None-Match": after_claim.headers["ETag"]})
    assert after_renewal.status_code == 304

    settle_success(api.container, claimed)
    after_settle = api.get(payment_id, **{"If-None-Match": after_claim.headers["ETag"]})
    assert after_settle.status_code == 200

    expire_leases(api.container, [payment_id], ago=timedelta(seconds=1))
    process_payment(api.container.runner(), payment_id, claimed.lease_token, owner="test")
    final = api.get(payment_id, **{"If-None-Match": after_settle.headers["ETag"]})
    assert final.status_code == 200
    assert final.json()["status"] == "succeeded"
    assert "Retry-After" not in final.headers
    again = api.get(payment_id, **{"If-None-Match": final.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""


def test_another_clients_payment_is_404_whatever_the_if_none_match(api):
    payment_id = api.post("etag-scoped").json()["id"]
    other = create_client(api.container.uow, "other-shop", Role.MERCHANT).api_key
    with api._client(other) as client:
        response = client.get(f"/v1/payments/{payment_id}", headers={"If-None-Match": "*"})
    assert response.status_code == 404


# -- If-Match on operator commands ------------------------------------------------------


def lease_row(api: Api, payment_id: str, state: str) -> dict[str, Any]:
    with api.ops() as client:
        response = client.get("/v1/ops/leases", params={"state": state, "limit": 1000})
    assert response.status_code == 200, response.text
    [row] = [r for r in response.json()["data"] if r["payment_id"] == payment_id]
    return row


def takeover(api: Api, payment_id: str, if_match: str | None, **body: Any) -> httpx.Response:
    headers = {} if if_match is None else {"If-Match": if_match}
    with api.ops() as client:
        return client.post(
            f"/v1/ops/payments/{payment_id}/takeover",
            json={"reason": "stuck", **body},
            headers=headers,
        )


def expired_claimed(api: Api, key: str) -> PaymentRecord:
    record = api.claim(record_of(api, api.post(key)))
    expire_leases(api.container, [record.id], ago=timedelta(seconds=1))
    return record


def test_a_stale_if_match_is_412_and_changes_nothing(api):
    record = expired_claimed(api, "if-match-stale")
    seen = lease_row(api, record.id, "expired")["etag"]
    assert seen == f'"{record.lease_token}.processing"'
    api.claim(reload(api.container, record.id))  # a worker got there first
    expire_leases(api.container, [record.id], ago=timedelta(seconds=1))
    before = reload(api.container, record.id)

    refused = takeover(api, record.id, seen)

    assert refused.status_code == 412, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/precondition-failed")
    assert reload(api.container, record.id) == before
    assert api.audit(record.id) == []
    current = lease_row(api, record.id, "expired")["etag"]
    accepted = takeover(api, record.id, current)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["lease"]["etag"] == f'"{before.lease_token + 1}.processing"'
    assert len(api.audit(record.id)) == 1


def test_if_match_is_checked_before_the_state_and_without_it_nothing_changes(api):
    record = expired_claimed(api, "if-match-order")
    stale = f'"{record.lease_token - 1}.processing"'
    # Stale tag on an otherwise refused command (live lease, no force): 412, not 409.
    api.renew(record)
    assert takeover(api, record.id, stale).status_code == 412
    assert takeover(api, record.id, None).status_code == 409
    assert takeover(api, record.id, "*", force=True).status_code == 200
    malformed = takeover(api, record.id, "7.processing", force=True)
    assert malformed.status_code == 400
    assert malformed.json()["type"].endswith("/invalid-request")


def test_retry_takes_if_match_too(api):
    record = api.claim(record_of(api, api.post("if-match-retry")))
    parked = force(api.container, record.id, status="needs_attention", locked_until=None)
    seen = lease_row(api, parked.id, "needs_attention")["etag"]
    with api.ops() as client:
        path = f"/v1/ops/payments/{parked.id}/retry"
        stale = client.post(
            path, json={"reason": "r"}, headers={"If-Match": f'"{record.lease_token}.processing"'}
        )
        assert stale.status_code == 412, stale.text
        assert reload(api.container, parked.id) == parked
        assert api.audit(parked.id) == []
        retried = client.post(path, json={"reason": "r"}, headers={"If-Match": seen})
        assert retried.status_code == 200, retried.text
        again = client.post(path, json={"reason": "r"}, headers={"If-Match": seen})
        assert again.status_code == 412
    assert len(api.audit(parked.id)) == 1


@pytest.mark.parametrize("round_", range(4))
def test_two_takeovers_racing_with_the_same_if_match_have_exactly_one_winner(api, round_):
    record = expired_claimed(api, f"if-match-race-{round_}")
    seen = lease_row(api, record.id, "expired")["etag"]
    barrier = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def operator() -> None:
        with api.ops() as client:
            barrier.wait()
            answers.append(
                client.post(
                    f"/v1/ops/payments/{record.id}/takeover",
                    json={"reason": "on call", "force": True},
                    headers={"If-Match": seen},
                )
            )

    threads = [threading.Thread(target=operator) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(a.status_code for a in answers) == [200, 412], [a.text for a in answers]
    assert len(api.audit(record.id)) == 1
    assert reload(api.container, record.id).lease_token == record.lease_token + 1


def test_openapi_documents_the_conditional_headers(api):
    # Building the whole document takes seconds on a loaded machine (httpx's default
    # timeout is 5 s): a bound, not a goal.
    with httpx.Client(base_url=api.url, trust_env=False, timeout=60) as client:
        schema = client.get("/openapi.json").json()
    read = schema["paths"]["/v1/payments/{payment_id}"]["get"]
    assert "If-None-Match" in [p["name"].title() for p in read["parameters"]] or any(
        p["name"].lower() == "if-none-match" for p in read["parameters"]
    )
    assert "304" in read["responses"]
    assert "ETag" in read["responses"]["200"]["headers"]
    for action in ("takeover", "retry"):
        operation = schema["paths"][f"/v1/ops/payments/{{payment_id}}/{action}"]["post"]
        assert any(p["name"].lower() == "if-match" for p in operation["parameters"])
        assert "application/problem+json" in operation["responses"]["412"]["content"]


def test_the_stored_bytes_are_what_the_encoder_makes_of_the_representation(api):
    first = api.post("encoder")
    record = record_of(api, first)
    accepted = replace(record, attempts=0)
    assert first.content == encode_representation(payment_representation(accepted))
    assert record.status is PaymentStatus.PROCESSING


# -- latest_event_sequence ----------------------------------------------------------------


def events_of(api: Api, payment_id: str) -> list[Any]:
    with api.container.uow(read_only=True) as uow:
        return uow.events.for_payment(payment_id)


def test_latest_event_sequence_is_the_newest_event_and_moves_the_etag_of_a_finished_payment(api):
    first = api.post("latest-seq")
    payment_id = first.json()["id"]
    assert first.json()["latest_event_sequence"] == 0  # no event yet
    assert api.get(payment_id).content == first.content

    process_payment(api.container.runner(), payment_id, 1, owner="test")
    finished = api.get(payment_id)
    (succeeded,) = events_of(api, payment_id)
    assert finished.json()["latest_event_sequence"] == succeeded.sequence == 1
    # The event's own representation names the event itself; the stored answer of record,
    # the event's object and a GET of the unchanged payment are the same document.
    assert succeeded.payload["latest_event_sequence"] == 1
    assert finished.content == reload(api.container, payment_id).final_response
    assert finished.json() == succeeded.payload

    # A later change of the finished payment (as a dispute or a refund writes) is an event:
    # the GET shows it and its ETag moves; the replay stays the answer of record.
    with api.container.uow() as uow:
        uow.outcomes.add_outbox_event(
            payment_id, "payment.disputed", {"object": "dispute"}, now=uow.now()
        )
        uow.commit()
    later = api.get(payment_id, **{"If-None-Match": finished.headers["ETag"]})
    assert later.status_code == 200
    assert later.json()["latest_event_sequence"] == 2
    assert later.headers["ETag"] != finished.headers["ETag"]
    assert api.get(payment_id, **{"If-None-Match": later.headers["ETag"]}).status_code == 304
    replay = api.post("latest-seq")
    assert replay.status_code == 200 and replay.content == finished.content
    with api.merchant() as client:
        listed = client.get("/v1/payments", params={"idempotency_key": "latest-seq"})
    assert listed.json()["data"][0]["latest_event_sequence"] == 2
