from __future__ import annotations

import pytest

from orchestrator.domain.fingerprint import canonical_json, request_fingerprint

BODY = {"amount": 100, "currency": "usd", "metadata": {"b": "2", "a": "1"}}


def test_canonical_json_sorts_keys_at_every_level_and_drops_whitespace():
    assert canonical_json(BODY) == '{"amount":100,"currency":"usd","metadata":{"a":"1","b":"2"}}'


def test_canonical_json_keeps_unicode_as_is():
    assert canonical_json({"d": "café ☕"}) == '{"d":"café ☕"}'


def test_key_order_does_not_change_the_fingerprint():
    shuffled = {"metadata": {"a": "1", "b": "2"}, "currency": "usd", "amount": 100}
    assert request_fingerprint("POST", "/v1/payments", BODY) == request_fingerprint(
        "POST", "/v1/payments", shuffled
    )


@pytest.mark.parametrize(
    "other",
    [
        {**BODY, "amount": 101},
        {**BODY, "currency": "eur"},
        {**BODY, "metadata": {"a": "1"}},
        {**BODY, "metadata": {"a": "1", "b": "2", "c": "3"}},
        {**BODY, "description": None},
    ],
)
def test_any_change_in_the_body_changes_the_fingerprint(other):
    assert request_fingerprint("POST", "/v1/payments", BODY) != request_fingerprint(
        "POST", "/v1/payments", other
    )


def test_method_and_path_are_part_of_the_fingerprint():
    base = request_fingerprint("POST", "/v1/payments", BODY)
    assert request_fingerprint("PUT", "/v1/payments", BODY) != base
    assert request_fingerprint("POST", "/v1/refunds", BODY) != base
    assert request_fingerprint("post", "/v1/payments", BODY) == base


def test_the_fingerprint_is_a_sha256_hex_digest():
    digest = request_fingerprint("POST", "/v1/payments", BODY)
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_floats_have_no_canonical_form_and_are_refused():
    with pytest.raises(TypeError):
        canonical_json({"amount": 1.5})
    with pytest.raises(TypeError):
        canonical_json({"nested": [{"x": 0.1}]})


def test_values_that_look_alike_stay_distinct():
    assert canonical_json({"a": 1}) != canonical_json({"a": "1"})
    assert canonical_json({"a": True}) != canonical_json({"a": 1})
