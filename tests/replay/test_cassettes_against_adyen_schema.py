"""Every Adyen cassette, request and answer, checked against Adyen's Checkout v71 subset
(``tests/fixtures/adyen/checkout-v71-subset.json``, from Adyen's own OpenAPI), and the checker
itself shown to fail on bodies the real Adyen could not take or send."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.replay.adyen_cassette_support import (
    ADYEN_CASSETTE_DIR,
    NotAdyenShaped,
    assert_adyen_shaped,
    exchange_errors,
)
from tests.replay.adyen_schema import request_errors, response_errors

CASSETTES = sorted(ADYEN_CASSETTE_DIR.glob("*.yaml"))
PAYMENTS = "/v71/payments"


def interactions(path: Path) -> list[dict[str, Any]]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = loaded["interactions"]
    return result


def json_of(raw: Any) -> Any:
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def test_there_are_cassettes_to_check() -> None:
    assert len(CASSETTES) >= 10


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_every_body_in_the_cassette_is_one_adyen_could_take_or_send(path: Path) -> None:
    for interaction in interactions(path):
        request, response = interaction["request"], interaction["response"]
        assert_adyen_shaped(
            request["method"],
            urlsplit(request["uri"]).path,
            response["status"]["code"],
            json_of(request["body"]),
            json_of(response["body"]["string"]),
        )


@pytest.mark.parametrize("path", CASSETTES, ids=lambda p: p.stem)
def test_no_cassette_holds_the_api_key(path: Path) -> None:
    for interaction in interactions(path):
        names = {name.lower() for name in interaction["request"]["headers"]}
        assert "x-api-key" not in names
        assert "authorization" not in names


# -- the checker itself ----------------------------------------------------------------


def _first(result_code: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recorded ``/payments`` request and its 200 answer with this ``resultCode``."""
    for path in CASSETTES:
        for interaction in interactions(path):
            request, response = interaction["request"], interaction["response"]
            if response["status"]["code"] != 200 or request["method"] != "POST":
                continue
            answer = json_of(response["body"]["string"])
            if answer.get("resultCode") == result_code:
                return json_of(request["body"]), answer
    raise AssertionError(f"no recorded {result_code}")


@pytest.fixture(scope="module")
def authorised() -> tuple[dict[str, Any], dict[str, Any]]:
    return _first("Authorised")


def test_a_recorded_authorisation_passes(authorised: tuple[dict[str, Any], dict[str, Any]]):
    request, answer = authorised
    assert exchange_errors(PAYMENTS, 200, request, answer) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resultCode", "Authorized"),  # not one of Adyen's result codes
        ("amount", {"currency": "EUR", "value": "1250"}),  # a string where Adyen sends int64
        ("pspReference", 1234567890123456),
        ("additionalData", ["not", "a", "map"]),
    ],
)
def test_an_answer_adyen_could_not_send_fails(
    authorised: tuple[dict[str, Any], dict[str, Any]], field: str, value: Any
) -> None:
    request, answer = authorised
    broken = copy.deepcopy(answer)
    broken[field] = value

    with pytest.raises(NotAdyenShaped, match=field):
        assert_adyen_shaped("POST", PAYMENTS, 200, request, broken)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("merchantAccount", None),  # required: removed below
        ("amount", {"currency": "EUR"}),  # value is required
        ("metadata", {"order": 1}),  # metadata values are strings
        ("shopperInteraction", "Online"),  # not one of Adyen's values
    ],
)
def test_a_request_adyen_would_not_take_fails(
    authorised: tuple[dict[str, Any], dict[str, Any]], field: str, value: Any
) -> None:
    request, answer = authorised
    broken = copy.deepcopy(request)
    if value is None:
        del broken[field]
    else:
        broken[field] = value

    with pytest.raises(NotAdyenShaped, match=f"request: .*{field}"):
        assert_adyen_shaped("POST", PAYMENTS, 200, broken, answer)


def test_a_broken_cassette_fails_the_cassette_check(tmp_path: Path) -> None:
    """The whole path the cassette test takes, on a copy with one answer spoiled."""
    source = ADYEN_CASSETTE_DIR / (
        "an_authorisation_with_automatic_capture_succeeds_under_our_reference_and_key.yaml"
    )
    loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
    answer = json_of(loaded["interactions"][0]["response"]["body"]["string"])
    answer["resultCode"] = "Approved"
    loaded["interactions"][0]["response"]["body"]["string"] = json.dumps(answer)
    spoiled = tmp_path / "spoiled.yaml"
    spoiled.write_text(yaml.safe_dump(loaded), encoding="utf-8")

    test_every_body_in_the_cassette_is_one_adyen_could_take_or_send(source)
    with pytest.raises(NotAdyenShaped, match="resultCode"):
        test_every_body_in_the_cassette_is_one_adyen_could_take_or_send(spoiled)


def test_an_error_answer_is_checked_against_adyens_service_error() -> None:
    good = {"status": 422, "errorCode": "101", "message": "Invalid card number"}
    bad = {"status": "422", "errorCode": 101}

    assert response_errors(PAYMENTS, 422, good) == []
    assert response_errors(PAYMENTS, 422, bad)


def test_a_path_outside_the_subset_is_never_valid() -> None:
    with pytest.raises(AssertionError, match="not a path"):
        request_errors("/v71/paymentLinks", {})
