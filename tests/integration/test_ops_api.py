"""The ops API over real HTTP (uvicorn on a free port), on PostgreSQL and SQLite: leases,
takeover with fencing and audit, retry of a parked payment, and the role check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, PaymentRecord, Role
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.services.api_keys import create_client
from tests.fakes.publisher import RecordingPublisher
from tests.harness.containers import build_container
from tests.harness.seeds import accept, finish_with_token, force, reload, settle_success
from tests.harness.server import ServerThread
from tests.integration.lease_helpers import expire_leases

PROBLEM_JSON = "application/problem+json"
LEASE_SECONDS = 60.0


@dataclass
class OpsApi:
    container: Container
    url: str
    publisher: RecordingPublisher
    merchant: ApiClient
    merchant_key: str
    ops: ApiClient
    ops_key: str

    def client(self, api_key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key or self.ops_key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, trust_env=False)

    def takeover(self, payment_id: str, body: Any, **kwargs: Any) -> httpx.Response:
        with self.client(**kwargs) as client:
            return client.post(f"/v1/ops/payments/{payment_id}/takeover", json=body)

    def retry(self, payment_id: str, body: Any) -> httpx.Response:
        with self.client() as client:
            return client.post(f"/v1/ops/payments/{payment_id}/retry", json=body)

    def audit(self, payment_id: str) -> list[dict[str, Any]]:
        with self.client() as client:
            response = client.get("/v1/ops/audit", params={"payment_id": payment_id})
        assert response.status_code == 200, response.text
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def payment(self, key: str) -> PaymentRecord:
        return accept(self.container, self.merchant, key)

    def claimed(self, key: str, owner: str = "worker-1") -> PaymentRecord:
        """A payment a worker holds (its lease is live for LEASE_SECONDS)."""
        record = self.payment(key)
        with self.container.uow() as uow:
            now = uow.now()
            claimed = uow.leases.claim(
                record.id,
                carried_token=record.lease_token,
                owner=owner,
                now=now,
                lease_until=now + timedelta(seconds=LEASE_SECONDS),
            )
            uow.commit()
        assert claimed is not None
        return claimed

    def settled(self, key: str) -> PaymentRecord:
        """A payment whose holder recorded the provider's answer and is about to finish:
        its finishing write succeeds unless it was fenced out."""
        return settle_success(self.container, self.claimed(key))

    def finish(self, record: PaymentRecord) -> PaymentRecord | None:
        """The holder's finishing write, with the token it holds."""
        return finish_with_token(self.container, record)


@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpsApi]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('ops') / 'payorch.sqlite3'}"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    publisher = RecordingPublisher()
    container = build_container(url, publisher=publisher, lease_seconds=LEASE_SECONDS)
    merchant = create_client(container.uow, "shop", Role.MERCHANT)
    ops = create_client(container.uow, "oncall-alice", Role.OPS)
    try:
        with ServerThread(create_app(container)) as server:
            yield OpsApi(
                container=container,
                url=server.url,
                publisher=publisher,
                merchant=merchant.client,
                merchant_key=merchant.api_key,
                ops=ops.client,
                ops_key=ops.api_key,
            )
    finally:
        container.close()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["detail"]
    return body


def operator_takeovers() -> float:
    value = REGISTRY.get_sample_value("payorch_lease_takeovers_total", {"by": "operator"})
    return value or 0.0


OPS_REQUESTS = [
    ("GET", "/v1/ops/leases", None),
    ("GET", "/v1/ops/audit", None),
    ("POST", "/v1/ops/payments/pay_x/takeover", {"reason": "r", "force": True}),
    ("POST", "/v1/ops/payments/pay_x/retry", {"reason": "r"}),
    ("POST", "/v1/ops/payments/retry", {"status": "needs_attention", "reason": "r"}),
]


@pytest.mark.parametrize(("method", "path", "body"), OPS_REQUESTS)
def test_a_merchant_key_is_forbidden_on_every_ops_route(api, method, path, body):
    with api.client(api.merchant_key) as client:
        response = client.request(method, path, json=body)
    assert_problem(response, 403)


@pytest.mark.parametrize(("method", "path", "body"), OPS_REQUESTS)
def test_no_key_is_unauthorized_on_every_ops_route(api, method, path, body):
    with httpx.Client(base_url=api.url, trust_env=False) as client:
        response = client.request(method, path, json=body)
    assert_problem(response, 401)


def test_operator_takes_over_an_expired_lease_and_the_old_holder_is_fenced(api):
    holder = api.settled("expired-1")
    expire_leases(api.container, [holder.id], ago=timedelta(seconds=1))
    api.publisher.published.clear()
    before = operator_takeovers()

    response = api.takeover(holder.id, {"reason": "worker host died"})

    assert response.status_code == 200, response.text
    body = response.json()
    new_token = holder.lease_token + 1
    assert body["action"] == "takeover"
    assert body["status"] == "processing"
    assert (body["old_token"], body["new_token"]) == (holder.lease_token, new_token)
    assert body["published"] is True
    assert body["lease"]["lease_owner"] == "dispatch:operator"
    assert api.publisher.published == [(holder.id, new_token)]
    assert operator_takeovers() == before + 1
    # The audit row: who (the ops client), when, why, which tokens.
    [entry] = api.audit(holder.id)
    assert entry == body["audit"]
    assert entry["actor_client_id"] == api.ops.id
    assert entry["actor_name"] == "oncall-alice"
    assert entry["action"] == "takeover"
    assert entry["reason"] == "worker host died"
    assert (entry["old_token"], entry["new_token"]) == (holder.lease_token, new_token)
    assert entry["created_at"]
    # The previous holder is fenced: its finishing write is refused.
    assert api.finish(holder) is None
    assert reload(api.container, holder.id).status is PaymentStatus.PROCESSING


def test_a_live_lease_needs_force(api):
    holder = api.settled("live-1")

    refused = api.takeover(holder.id, {"reason": "looks stuck"})

    problem = assert_problem(refused, 409)
    assert "force" in problem["detail"]
    assert problem["lease_owner"] == "worker-1"
    assert reload(api.container, holder.id).lease_token == holder.lease_token
    assert api.audit(holder.id) == []

    forced = api.takeover(holder.id, {"reason": "worker is wedged", "force": True})

    assert forced.status_code == 200, forced.text
    assert forced.json()["new_token"] == holder.lease_token + 1
    assert api.finish(holder) is None
    assert [e["reason"] for e in api.audit(holder.id)] == ["worker is wedged"]


def test_a_finished_payment_answers_409_and_is_left_alone(api):
    record = api.settled("finished-1")
    assert api.finish(record) is not None

    problem = assert_problem(api.takeover(record.id, {"reason": "r", "force": True}), 409)

    assert problem["payment_status"] == "succeeded"
    assert reload(api.container, record.id).lease_token == record.lease_token
    assert api.audit(record.id) == []


@pytest.mark.parametrize("payment_id", ["pay_" + "0" * 32, "pay_unknown", "x" * 300])
def test_an_unknown_payment_answers_404(api, payment_id):
    assert_problem(api.takeover(payment_id, {"reason": "r", "force": True}), 404)
    assert_problem(api.retry(payment_id, {"reason": "r"}), 404)


def test_a_parked_payment_is_retried_not_taken_over(api):
    record = api.claimed("parked-1")
    parked = force(
        api.container,
        record.id,
        status="needs_attention",
        recovery_point="intent_created",
        provider_payment_id="pi_123",
        locked_until=None,
        lease_owner=None,
        attempts=8,
        unknown_outcomes=8,
        last_error="OutcomeUnknown: read timeout",
    )
    assert_problem(api.takeover(parked.id, {"reason": "r", "force": True}), 409)
    api.publisher.published.clear()

    response = api.retry(parked.id, {"reason": "provider incident over"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["action"] == "retry"
    assert body["status"] == "processing"
    assert body["new_token"] == parked.lease_token + 1
    assert body["published"] is True
    assert api.publisher.published == [(parked.id, parked.lease_token + 1)]
    retried = reload(api.container, parked.id)
    assert retried.status is PaymentStatus.PROCESSING
    assert retried.recovery_point is RecoveryPoint.INTENT_CREATED  # resumes where it stopped
    assert (retried.attempts, retried.unknown_outcomes) == (0, 0)
    [entry] = api.audit(parked.id)
    assert entry["action"] == "retry"
    assert entry["actor_client_id"] == api.ops.id
    assert entry["reason"] == "provider incident over"
    # Retrying again is a conflict: it is processing now.
    assert_problem(api.retry(parked.id, {"reason": "again"}), 409)


def test_a_finished_payment_cannot_be_retried(api):
    record = api.settled("finished-2")
    assert api.finish(record) is not None
    assert_problem(api.retry(record.id, {"reason": "r"}), 409)


def test_a_failed_publish_still_commits_the_takeover(api):
    holder = api.claimed("broker-down-1")
    api.publisher.fail = True
    try:
        response = api.takeover(holder.id, {"reason": "r", "force": True})
    finally:
        api.publisher.fail = False
    assert response.status_code == 200, response.text
    assert response.json()["published"] is False
    assert reload(api.container, holder.id).lease_token == holder.lease_token + 1


def test_leases_are_listed_by_state(api):
    expired = api.payment("list-expired")
    expire_leases(api.container, [expired.id], ago=timedelta(seconds=5))
    active = api.claimed("list-active")
    parked = force(api.container, api.payment("list-parked").id, status="needs_attention")

    def listed(state: str) -> dict[str, dict[str, Any]]:
        with api.client() as client:
            response = client.get("/v1/ops/leases", params={"state": state, "limit": 1000})
        assert response.status_code == 200, response.text
        assert response.json()["state"] == state
        return {lease["payment_id"]: lease for lease in response.json()["data"]}

    expired_leases = listed("expired")
    assert expired.id in expired_leases
    assert expired_leases[expired.id]["lease_expired"] is True
    assert active.id not in expired_leases
    active_leases = listed("active")
    assert active_leases[active.id]["lease_owner"] == "worker-1"
    assert active_leases[active.id]["lease_expired"] is False
    assert expired.id not in active_leases
    assert parked.id in listed("needs_attention")
    with api.client() as client:
        assert_problem(client.get("/v1/ops/leases", params={"state": "stale"}), 400)
        assert_problem(client.get("/v1/ops/leases", params={"limit": 0}), 400)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 1001},
        {"reason": 5},
        {"reason": "r", "force": "yes"},
        {"reason": "r", "force": 1},
        {"reason": "r", "expected_token": 3},
        [],
        "reason",
    ],
)
def test_a_bad_body_is_a_400_problem_and_changes_nothing(api, body):
    holder = api.claimed(f"bad-body-{abs(hash(repr(body)))}")
    assert_problem(api.takeover(holder.id, body), 400)
    assert reload(api.container, holder.id).lease_token == holder.lease_token


def test_a_body_that_is_not_json_is_refused(api):
    holder = api.claimed("not-json")
    with api.client() as client:
        path = f"/v1/ops/payments/{holder.id}/takeover"
        broken = client.post(path, content=b"{", headers={"Content-Type": "application/json"})
        text = client.post(path, content=b"reason=x", headers={"Content-Type": "text/plain"})
    assert_problem(broken, 400)
    assert_problem(text, 415)


def test_the_audit_trail_lists_newest_first_and_filters_by_payment(api):
    one = api.claimed("audit-1")
    two = api.claimed("audit-2")
    assert api.takeover(one.id, {"reason": "first", "force": True}).status_code == 200
    assert api.takeover(two.id, {"reason": "second", "force": True}).status_code == 200
    with api.client() as client:
        everything = client.get("/v1/ops/audit").json()["data"]
    reasons = [e["reason"] for e in everything if e["payment_id"] in (one.id, two.id)]
    assert reasons == ["second", "first"]
    assert [e["payment_id"] for e in api.audit(one.id)] == [one.id]


EXPECTED_STATUSES = {
    ("get", "/v1/ops/leases"): {"200", "400", "401", "403", "503"},
    ("get", "/v1/ops/audit"): {"200", "400", "401", "403", "503"},
    ("post", "/v1/ops/payments/{payment_id}/takeover"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "412",
        "413",
        "415",
        "503",
    },
    ("post", "/v1/ops/payments/{payment_id}/retry"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "412",
        "413",
        "415",
        "503",
    },
}


def test_every_ops_status_is_documented_in_openapi(api):
    # Building the whole document takes seconds on a loaded machine (httpx's default
    # timeout is 5 s): a bound, not a goal.
    with httpx.Client(base_url=api.url, trust_env=False, timeout=60) as client:
        schema = client.get("/openapi.json").json()
    for (method, path), statuses in EXPECTED_STATUSES.items():
        operation = schema["paths"][path][method]
        assert set(operation["responses"]) >= statuses, (method, path)
        for status in statuses - {"200"}:
            assert PROBLEM_JSON in operation["responses"][status]["content"], (path, status)
        if method == "post":
            body = operation["requestBody"]["content"]["application/json"]["schema"]
            assert "reason" in body["required"]
