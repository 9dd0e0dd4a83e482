"""Every cassette, checked against Stripe's own OpenAPI schemas and the pinned API version,
and the checker itself shown to fail on bodies the real Stripe could not send."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from orchestrator.stripe_version import PINNED_API_VERSION
from tests.replay.cassette_support import CASSETTE_DIR
from tests.replay.stripe_schema import NotStripeShaped, assert_stripe_shaped, schema_errors

CASSETTES = sorted(CASSETTE_DIR.glob("*.yaml"))


def interactions(path: Path) -> list[dict[str, Any]]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = loaded["interactions"]
    return result


def header(headers: dict[str, list[str]], name: str) -> str | None:
    for key, values in headers.items():
        if key.lower() == name:
            return values[0]
    return None


def body_of(response: dict[str, Any]) -> Any:
    raw = response["body"]["string"]
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def test_there_are_cassettes_to_check():
    assert len(CASSETTES) >= 10


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_every_response_body_in_the_cassette_is_one_stripe_could_send(path: Path):
    for interaction in interactions(path):
        request, response = interaction["request"], interaction["response"]
        assert_stripe_shaped(
            request["method"],
            urlsplit(request["uri"]).path,
            response["status"]["code"],
            body_of(response),
        )


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_every_cassette_was_recorded_with_the_pinned_stripe_version(path: Path):
    for interaction in interactions(path):
        assert header(interaction["request"]["headers"], "stripe-version") == PINNED_API_VERSION
        assert header(interaction["response"]["headers"], "stripe-version") == PINNED_API_VERSION


# -- the checker itself ----------------------------------------------------------------


@pytest.fixture(scope="module")
def created_intent() -> dict[str, Any]:
    for path in CASSETTES:
        for interaction in interactions(path):
            request, response = interaction["request"], interaction["response"]
            path_only = urlsplit(request["uri"]).path
            if (
                request["method"] == "POST"
                and path_only.endswith("/v1/payment_intents")
                and response["status"]["code"] == 200
            ):
                return body_of(response)
    raise AssertionError("no recorded create")


def test_a_recorded_intent_passes(created_intent):
    assert schema_errors("POST", "/v1/payment_intents", 200, created_intent) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status", "sucseeded"),  # not one of Stripe's statuses
        ("amount", "2000"),  # a string where Stripe sends an integer
        ("metadata", ["not", "a", "map"]),
        ("capture_method", None),  # required, never null
        ("last_payment_error", {"type": "not_an_error_type"}),
    ],
)
def test_a_body_stripe_could_not_send_fails(created_intent, field, value):
    broken = copy.deepcopy(created_intent)
    broken[field] = value

    with pytest.raises(NotStripeShaped, match=field):
        assert_stripe_shaped("POST", "/v1/payment_intents", 200, broken)


def test_a_missing_required_field_fails(created_intent):
    broken = {k: v for k, v in created_intent.items() if k != "status"}

    assert any(
        "'status' is a required property" in e
        for e in schema_errors("GET", "/v1/payment_intents/pi_1", 200, broken)
    )


def test_a_list_whose_items_are_broken_fails(created_intent):
    item = copy.deepcopy(created_intent)
    item["created"] = "yesterday"
    page = {"object": "list", "url": "/v1/payment_intents", "has_more": False, "data": [item]}

    assert schema_errors("GET", "/v1/payment_intents", 200, page)


def test_an_error_answer_is_checked_against_stripes_error_object():
    good = {"error": {"type": "card_error", "code": "card_declined", "message": "declined"}}
    bad = {"error": {"type": "oops"}}

    assert schema_errors("POST", "/v1/payment_intents/pi_1/confirm", 402, good) == []
    assert schema_errors("POST", "/v1/payment_intents/pi_1/confirm", 402, bad)


def test_a_path_outside_the_spec_is_never_valid():
    assert schema_errors("GET", "/v1/charges/ch_1", 200, {})
