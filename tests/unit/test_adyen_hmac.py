"""Adyen's notification HMAC (``orchestrator/providers/adyen_hmac.py``) against the vectors
in ``tests/fixtures/adyen/fixtures.json``: the Python library's unit vector, four items
signed by Adyen's test platform (references with ``:``, ``\\`` and ``/``: no escaping), and
every webhook fixture signed with the library's public test key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.providers.adyen_hmac import (
    sign_item,
    signed_item,
    signed_string,
    verify_item,
)

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "adyen" / "fixtures.json").read_text()
)
FIXTURE_KEY = FIXTURES["_about"]["fixture_hmac_key_hex"]
VECTORS = FIXTURES["hmac_test_vectors"]


def _fixture_items() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    cases = []
    for name, fixture in FIXTURES["notifications"].items():
        wrappers = fixture["body"]["notificationItems"]
        for index, expected in enumerate(fixture.get("hmac_with_fixture_key", [])):
            cases.append((f"{name}[{index}]", wrappers[index]["NotificationRequestItem"], expected))
    return cases


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_the_signed_string_and_signature_match_adyens_vectors(name: str) -> None:
    vector = VECTORS[name]
    assert signed_string(vector["item"]) == vector["signed_string"]
    assert sign_item(vector["item"], vector["key_hex"]) == vector["expected_signature"]


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_items_signed_by_adyen_verify(name: str) -> None:
    vector = VECTORS[name]
    item = signed_item(vector["item"], vector["key_hex"])
    assert item["additionalData"]["hmacSignature"] == vector["expected_signature"]
    assert verify_item(item, vector["key_hex"])
    if "hmacSignature" in vector["item"].get("additionalData", {}):
        assert verify_item(vector["item"], vector["key_hex"])  # as Adyen sent it


@pytest.mark.parametrize(
    ("name", "item", "expected"), _fixture_items(), ids=[c[0] for c in _fixture_items()]
)
def test_every_webhook_fixture_signs_as_recorded(
    name: str, item: dict[str, Any], expected: dict[str, str]
) -> None:
    assert signed_string(item) == expected["signed_string"]
    assert sign_item(item, FIXTURE_KEY) == expected["signature"]


def test_the_fixtures_hold_signed_webhooks() -> None:
    assert len(_fixture_items()) >= 15


def test_a_wrong_key_a_changed_field_or_no_signature_does_not_verify() -> None:
    vector = VECTORS["python_lib_unit_vector"]
    item = signed_item(vector["item"], vector["key_hex"])
    assert not verify_item(item, FIXTURE_KEY[:-2] + "00")
    tampered = {**item, "amount": {"currency": "EUR", "value": 1}}
    assert not verify_item(tampered, vector["key_hex"])
    assert not verify_item(vector["item"], vector["key_hex"])  # unsigned
    assert not verify_item(item, "not hex")


def test_any_of_several_keys_verifies_during_a_rotation() -> None:
    vector = VECTORS["python_lib_unit_vector"]
    item = signed_item(vector["item"], vector["key_hex"])
    assert verify_item(item, ["00" * 32, vector["key_hex"]])
    assert not verify_item(item, [])


def test_absent_fields_sign_as_empty_strings() -> None:
    assert signed_string({"eventCode": "REFUND"}) == "::::::REFUND:"
    with pytest.raises(ValueError, match="hex"):
        sign_item({}, "xyz")
