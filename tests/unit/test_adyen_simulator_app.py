"""The Adyen simulator as an in-process ASGI app (no server): its edges (authentication,
unknown URLs, malformed bodies) and the admin API's refusals."""

from __future__ import annotations

import base64
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from devtools.adyen_simulator import (
    AdyenSimulatorConfig,
    create_app,
    parse_fault_spec,
    three_ds_result,
)

HEADERS = {"X-API-Key": "AQE_inprocess"}
PAYMENT: dict[str, Any] = {
    "merchantAccount": "PayorchECOM",
    "amount": {"currency": "EUR", "value": 1000},
    "reference": "order-1",
    "paymentMethod": {"type": "scheme", "encryptedCardNumber": "test_4111111111111111"},
}


class InProcess:
    def __init__(self, app: Starlette) -> None:
        self._app = app

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self._app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
                return await http.request(method, url, **kwargs)

        return anyio.run(call)


@pytest.fixture
def sim() -> InProcess:
    return InProcess(create_app(AdyenSimulatorConfig()))


def test_basic_auth_is_accepted_like_an_api_key(sim: InProcess) -> None:
    token = base64.b64encode(b"ws@Company.Payorch:secret").decode()
    ok = sim.request(
        "POST", "/v71/payments", json=PAYMENT, headers={"Authorization": f"Basic {token}"}
    )
    assert ok.status_code == 200
    bad = sim.request("POST", "/v71/payments", json=PAYMENT, headers={"Authorization": "Basic !!"})
    assert bad.status_code == 401


def test_only_configured_api_keys_are_accepted() -> None:
    sim = InProcess(create_app(AdyenSimulatorConfig(api_keys=("AQE_good",))))
    assert (
        sim.request(
            "POST", "/v71/payments", json=PAYMENT, headers={"X-API-Key": "AQE_bad"}
        ).status_code
        == 401
    )
    assert (
        sim.request(
            "POST", "/v71/payments", json=PAYMENT, headers={"X-API-Key": "AQE_good"}
        ).status_code
        == 200
    )


def test_a_malformed_body_is_400_702(sim: InProcess) -> None:
    response = sim.request("POST", "/v71/payments", content=b"{nope", headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["errorCode"] == "702"


def test_an_unknown_path_is_404_in_adyens_shape(sim: InProcess) -> None:
    response = sim.request("GET", "/v71/payments", headers=HEADERS)
    assert response.status_code == 404
    assert set(response.json()) == {"status", "errorCode", "message", "errorType"}


def test_the_answer_names_its_psp_reference_and_key_in_headers(sim: InProcess) -> None:
    response = sim.request(
        "POST", "/v71/payments", json=PAYMENT, headers={**HEADERS, "Idempotency-Key": "k-1"}
    )
    assert response.headers["pspReference"] == response.json()["pspReference"]
    assert response.headers["Idempotency-Key"] == "k-1"


@pytest.mark.parametrize(
    ("method", "url", "body", "status"),
    [
        ("POST", "/_sim/faults", {"spec": "confirm:explode"}, 400),
        ("POST", "/_sim/faults", [1], 400),
        ("DELETE", "/_sim/faults/99", None, 404),
        ("POST", "/_sim/notifications", {"url": "http://x", "hmac_key": "not hex"}, 400),
        ("POST", "/_sim/notifications", {"url": 5, "hmac_key": None}, 400),
        ("POST", "/_sim/notifications", {"url": None, "hmac_key": None, "basic_auth": "x"}, 400),
        ("POST", "/_sim/payments/NOPE/settle", {}, 404),
        ("POST", "/_sim/payments/NOPE/settle", {"outcome": "maybe"}, 400),
        ("GET", "/_sim/three_ds_result?outcome=maybe", None, 400),
    ],
)
def test_the_admin_api_refuses_bad_requests(
    sim: InProcess, method: str, url: str, body: Any, status: int
) -> None:
    assert sim.request(method, url, json=body).status_code == status


def test_settling_a_payment_that_is_not_pending_is_409(sim: InProcess) -> None:
    psp = sim.request("POST", "/v71/payments", json=PAYMENT, headers=HEADERS).json()["pspReference"]
    assert sim.request("POST", f"/_sim/payments/{psp}/settle", json={}).status_code == 409


def test_the_admin_api_lists_faults_requests_payments_and_movements(sim: InProcess) -> None:
    armed = sim.request("POST", "/_sim/faults", json=[{"spec": "payments:latency:seconds=0"}])
    assert armed.status_code == 201
    sim.request("POST", "/v71/payments", json=PAYMENT, headers=HEADERS)
    assert sim.request("GET", "/_sim/faults").json()["rules"][0]["fired"] == 1
    (logged,) = sim.request("GET", "/_sim/requests").json()["data"]
    assert (logged["operation"], logged["fault"], logged["status"]) == ("payments", "latency", 200)
    (payment,) = sim.request("GET", "/_sim/payments?reference=order-1").json()["data"]
    assert payment["status"] == "authorised"
    assert sim.request("GET", "/_sim/movements").json()["authorisations"]["total"] == 1
    assert sim.request("POST", "/_sim/reset").status_code == 200
    assert sim.request("GET", "/_sim/payments").json()["data"] == []


def test_the_passing_three_ds_result_is_adyens_own_example() -> None:
    assert three_ds_result() == "eyJ0cmFuc1N0YXR1cyI6IlkifQ=="


def test_a_down_key_store_is_503_703_transient_and_saves_nothing(sim: InProcess) -> None:
    sim.request("POST", "/_sim/faults", json={"spec": "payments:idempotency_unavailable:times=1"})
    keyed = {**HEADERS, "Idempotency-Key": "k-703"}
    down = sim.request("POST", "/v71/payments", json=PAYMENT, headers=keyed)
    assert (down.status_code, down.json()["errorCode"]) == (503, "703")
    assert down.headers["transient-error"] == "true"
    assert sim.request("GET", "/_sim/payments").json()["data"] == []
    assert sim.request("POST", "/v71/payments", json=PAYMENT, headers=keyed).status_code == 200


@pytest.mark.parametrize("status", [409, 422])
def test_a_key_in_flight_answers_704_with_the_configured_status(status: int) -> None:
    app = create_app(AdyenSimulatorConfig(idempotency_in_flight_status=status))
    app.state.simulator.faults.add(parse_fault_spec("payments:latency:seconds=0.5:times=1"))
    answers: list[httpx.Response] = []
    keyed = {**HEADERS, "Idempotency-Key": "k-704"}

    async def both() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:

            async def send(delay: float) -> None:
                await anyio.sleep(delay)
                answers.append(await http.post("/v71/payments", json=PAYMENT, headers=keyed))

            async with anyio.create_task_group() as group:
                group.start_soon(send, 0.0)
                group.start_soon(send, 0.2)

    anyio.run(both)
    twin, first = answers  # the twin answers first: the first is still sleeping
    assert (twin.status_code, twin.json()["errorCode"]) == (status, "704")
    assert twin.headers["transient-error"] == "true"
    assert first.status_code == 200


def test_the_in_flight_status_is_409_or_422() -> None:
    with pytest.raises(ValueError, match="409 or 422"):
        AdyenSimulatorConfig(idempotency_in_flight_status=500)


@pytest.mark.parametrize(
    ("stored", "result_code", "refusal_code"),
    [
        ("8415718415172200", "Authorised", None),
        ("8415718415172201", "Refused", "2"),
        ("8415718415172212", "Refused", "12"),
    ],
)
def test_the_simulators_stored_cards_answer_as_the_cards_they_were_stored_from(
    sim: InProcess, stored: str, result_code: str, refusal_code: str | None
) -> None:
    body = {
        **PAYMENT,
        "paymentMethod": {"type": "scheme", "storedPaymentMethodId": stored},
        "shopperReference": "cus_ada",
    }

    answer = sim.request("POST", "/v71/payments", json=body, headers=HEADERS).json()

    assert answer["resultCode"] == result_code
    assert answer.get("refusalReasonCode") == refusal_code
