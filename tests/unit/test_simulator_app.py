"""The simulator as an in-process ASGI app: Stripe's edges (auth, unknown URLs, bad bodies)
and the admin API, without a server."""

from __future__ import annotations

import base64
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from devtools.simulator import SimulatorConfig, create_app, parse_fault_spec
from devtools.simulator.errors import ApiError
from devtools.simulator.events import EventLog
from orchestrator.stripe_version import PINNED_API_VERSION

AUTH = {"Authorization": "Bearer sk_test_inprocess"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class InProcessClient:
    """Synchronous calls into the ASGI app through httpx's ASGI transport (no server)."""

    def __init__(self, app: Starlette) -> None:
        self._app = app

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self._app)
            # Like the SDK: every request names the API version (the simulator insists).
            async with httpx.AsyncClient(
                transport=transport,
                base_url="http://sim",
                headers={"Stripe-Version": PINNED_API_VERSION},
            ) as http:
                return await http.request(method, url, **kwargs)

        return anyio.run(call)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


@pytest.fixture
def client() -> InProcessClient:
    config = SimulatorConfig(faults=(parse_fault_spec("retrieve:latency:seconds=0"),))
    return InProcessClient(create_app(config))


def test_a_missing_api_key_is_401_like_stripe(client: InProcessClient) -> None:
    response = client.get("/v1/payment_intents")

    assert response.status_code == 401
    assert "You did not provide an API key" in response.json()["error"]["message"]


@pytest.mark.parametrize("version", ["2023-08-16", "2025-03-31.basil", ""])
def test_another_stripe_version_is_refused_loudly(client: InProcessClient, version: str) -> None:
    response = client.get("/v1/payment_intents", headers={**AUTH, "Stripe-Version": version})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "api_version_unexpected"
    assert PINNED_API_VERSION in error["message"]


def test_the_pinned_stripe_version_is_answered_and_echoed(client: InProcessClient) -> None:
    response = client.get("/v1/payment_intents", headers=AUTH)

    assert response.status_code == 200
    assert response.headers["Stripe-Version"] == PINNED_API_VERSION


def test_basic_auth_with_the_key_as_user_is_accepted(client: InProcessClient) -> None:
    token = base64.b64encode(b"sk_test_inprocess:").decode()

    response = client.get("/v1/payment_intents", headers={"Authorization": f"Basic {token}"})

    assert response.status_code == 200
    assert response.json()["object"] == "list"


def test_an_unknown_url_is_stripes_unrecognized_request_url(client: InProcessClient) -> None:
    response = client.post("/v1/customers", headers=AUTH)

    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("Unrecognized request URL (POST")


def test_a_missing_amount_is_a_validation_error_that_is_not_saved(client: InProcessClient) -> None:
    first = client.post(
        "/v1/payment_intents",
        content="currency=usd",
        headers={**AUTH, **FORM, "Idempotency-Key": "k"},
    )
    second = client.post(
        "/v1/payment_intents",
        content="currency=usd&amount=900",
        headers={**AUTH, **FORM, "Idempotency-Key": "k"},
    )

    assert first.status_code == 400
    assert first.json()["error"]["code"] == "parameter_missing"
    assert second.status_code == 200


def test_a_non_integer_amount_is_refused(client: InProcessClient) -> None:
    response = client.post(
        "/v1/payment_intents", content="currency=usd&amount=ten", headers={**AUTH, **FORM}
    )

    assert response.json()["error"]["code"] == "parameter_invalid_integer"


def test_every_answer_carries_a_request_id_and_post_answers_echo_the_key(
    client: InProcessClient,
) -> None:
    response = client.post(
        "/v1/payment_intents",
        content="currency=usd&amount=900",
        headers={**AUTH, **FORM, "Idempotency-Key": "k-echo"},
    )

    assert response.headers["Request-Id"].startswith("req_")
    assert response.headers["Idempotency-Key"] == "k-echo"


def test_the_admin_api_arms_and_lists_faults(client: InProcessClient) -> None:
    added = client.post("/_sim/faults", json=[{"spec": "confirm:hang:times=1"}])
    bad = client.post("/_sim/faults", json={"mode": "explode"})

    assert added.status_code == 201
    assert added.json()["rules"][0]["spec"] == "confirm:hang:times=1"
    assert bad.status_code == 400
    specs = [r["spec"] for r in client.get("/_sim/faults").json()["rules"]]
    assert specs == ["retrieve:latency:seconds=0.0", "confirm:hang:times=1"]


def test_reset_re_arms_the_start_up_faults_only(client: InProcessClient) -> None:
    client.post("/_sim/faults", json={"spec": "confirm:hang"})

    client.post("/_sim/reset")

    specs = [r["spec"] for r in client.get("/_sim/faults").json()["rules"]]
    assert specs == ["retrieve:latency:seconds=0.0"]


def test_removing_an_unknown_rule_is_404(client: InProcessClient) -> None:
    assert client.delete("/_sim/faults/999").status_code == 404


def test_list_refuses_a_limit_above_100(client: InProcessClient) -> None:
    response = client.get("/v1/payment_intents", params={"limit": "101"}, headers=AUTH)

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "limit"


def test_search_refuses_or_queries(client: InProcessClient) -> None:
    response = client.get(
        "/v1/payment_intents/search",
        params={"query": "status:'succeeded' OR status:'canceled'"},
        headers=AUTH,
    )

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "query"


def test_the_event_log_is_a_ring_that_forgets_the_oldest_first() -> None:
    log = EventLog(api_version="2026-10-28.endive", max_events=3)
    made = [
        log.emit(
            "payment_intent.created", {"id": f"pi_{n}", "object": "payment_intent"}, intent_id=None
        )
        for n in range(5)
    ]

    listed = log.list_events({}).body["data"]

    assert [e["data"]["object"]["id"] for e in listed] == ["pi_4", "pi_3", "pi_2"]
    assert log.retrieve(made[2].body["id"], {}).status == 200
    with pytest.raises(ApiError) as forgotten:
        log.retrieve(made[0].body["id"], {})
    assert forgotten.value.status == 404
