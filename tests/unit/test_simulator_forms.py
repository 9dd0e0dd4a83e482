"""Decoding Stripe's form encoding the way the SDK writes it."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from devtools.simulator.forms import FormError, decode_form


def test_brackets_nest_into_dicts_and_indexes_into_lists() -> None:
    raw = (
        urlencode(
            [
                ("amount", "1000"),
                ("metadata[payorch_record_id]", "rec-1"),
                ("metadata[order]", "7"),
                ("payment_method_types[0]", "card"),
                ("payment_method_types[1]", "link"),
                ("automatic_payment_methods[enabled]", "true"),
                ("created[gte]", "1700000000"),
            ]
        )
        .replace("%5B", "[")
        .replace("%5D", "]")
    )

    assert decode_form(raw) == {
        "amount": "1000",
        "metadata": {"payorch_record_id": "rec-1", "order": "7"},
        "payment_method_types": ["card", "link"],
        "automatic_payment_methods": {"enabled": "true"},
        "created": {"gte": "1700000000"},
    }


def test_percent_encoded_brackets_and_special_characters_decode_too() -> None:
    raw = urlencode([("metadata[note]", "a=b&c[d]=e"), ("expand[]", "x"), ("expand[]", "y")])

    assert decode_form(raw) == {"metadata": {"note": "a=b&c[d]=e"}, "expand": ["x", "y"]}


def test_an_empty_body_is_no_params() -> None:
    assert decode_form("") == {}


@pytest.mark.parametrize("raw", ["metadata=x&metadata[k]=v", "metadata[k]=v&metadata=x", "[k]=v"])
def test_conflicting_or_nameless_keys_are_refused(raw: str) -> None:
    with pytest.raises(FormError):
        decode_form(raw)
