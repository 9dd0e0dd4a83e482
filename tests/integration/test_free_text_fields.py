"""NUL and other control characters in any free-text field of a request body are a 400
problem naming the field, never a 500 (PostgreSQL cannot store NUL in text; an insert
that tries fails).  One validator (``orchestrator.domain.text``) serves every schema, the
console's forms and the CLI's reasons."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from orchestrator.api.routes.ops_captures import OperatorCancelRequest, OperatorCaptureRequest
from orchestrator.api.routes.ops_events import RedeliverRequest
from orchestrator.api.routes.ops_leases import RetryRequest, SyncRefundsRequest, TakeoverRequest
from orchestrator.api.routes.webhook_endpoints import EndpointCreate, EndpointUpdate
from orchestrator.api.schemas import TEXT_PATTERN
from tests.harness.captures import authorized_payment
from tests.harness.refunds import operation_count
from tests.integration.console_helpers import post_form, signed_in
from tests.integration.hardening_helpers import Api, assert_problem, running_api
from tests.integration.webhook_helpers import client_of

PAYMENT = "pay_" + "0" * 32
EVENT = "evt_" + "0" * 32
CONTROLS = ["nul\x00here", "bell\x07", "escape\x1b[31m", "c1\x85"]


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    with running_api(database_url) as running:
        yield running


OPS_BODIES: list[tuple[str, dict[str, Any], str]] = [
    (f"/v1/ops/payments/{PAYMENT}/takeover", {"reason": "{text}"}, "reason"),
    (f"/v1/ops/payments/{PAYMENT}/retry", {"reason": "{text}"}, "reason"),
    ("/v1/ops/payments/retry", {"status": "needs_attention", "reason": "{text}"}, "reason"),
    (f"/v1/ops/payments/{PAYMENT}/sync_refunds", {"reason": "{text}"}, "reason"),
    (f"/v1/ops/payments/{PAYMENT}/capture", {"reason": "{text}"}, "reason"),
    (f"/v1/ops/payments/{PAYMENT}/cancel", {"reason": "{text}"}, "reason"),
    (f"/v1/ops/events/{EVENT}/redeliver", {"reason": "{text}"}, "reason"),
]


def _filled(body: dict[str, Any], text: str) -> dict[str, Any]:
    return {key: text if value == "{text}" else value for key, value in body.items()}


@pytest.mark.parametrize("text", CONTROLS)
def test_a_control_character_in_an_ops_reason_is_a_400_naming_the_field(
    api: Api, text: str
) -> None:
    with api.client(api.ops_key) as ops:
        for path, body, field in OPS_BODIES:
            answer = ops.post(path, json=_filled(body, text))
            problem = assert_problem(answer, 400, "invalid-request")
            assert [e["field"] for e in problem["errors"]] == [field], (path, problem)
            assert "control characters" in problem["detail"], (path, problem)


@pytest.mark.parametrize("text", CONTROLS)
def test_a_control_character_in_a_webhook_endpoint_description_is_a_400(
    api: Api, text: str
) -> None:
    endpoint = {"url": "https://93.184.216.34/payorch", "events": ["*"]}
    with api.client() as merchant:
        created = merchant.post("/v1/webhook_endpoints", json={**endpoint, "description": text})
        good = merchant.post("/v1/webhook_endpoints", json={**endpoint, "description": "ok"})
        assert good.status_code == 201, good.text
        changed = merchant.post(
            f"/v1/webhook_endpoints/{good.json()['id']}", json={"description": text}
        )
    for answer in (created, changed):
        problem = assert_problem(answer, 400, "invalid-request")
        assert [e["field"] for e in problem["errors"]] == ["description"]


def test_a_nul_in_the_console_capture_forms_reason_is_a_form_error(api: Api) -> None:
    merchant = client_of(api.container, api.client_a_id)
    payment = authorized_payment(api.container, merchant, "order-1", amount=1500)
    client, token = signed_in(api)
    with closing(client):
        refused = post_form(
            client, f"/ops/payments/{payment.id}/capture", csrf_token=token, reason="a\x00b"
        )
    assert refused.status_code == 400
    assert "must not contain control characters" in refused.text
    assert operation_count(api.container, payment.id) == 0


def test_every_reason_and_description_schema_states_the_rule() -> None:
    for model in (
        TakeoverRequest,
        RetryRequest,
        SyncRefundsRequest,
        RedeliverRequest,
        OperatorCaptureRequest,
        OperatorCancelRequest,
    ):
        assert model.model_json_schema()["properties"]["reason"]["pattern"] == TEXT_PATTERN
    for endpoint_model in (EndpointCreate, EndpointUpdate):
        [text, _null] = endpoint_model.model_json_schema()["properties"]["description"]["anyOf"]
        assert text["pattern"] == TEXT_PATTERN
