"""One key order everywhere: the representation as built, as stored, as read back."""

from __future__ import annotations

import json
import random

from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import Failure
from orchestrator.domain.payment_representation import (
    PAYMENT_FIELDS,
    canonical_payment,
    payment_representation,
)
from orchestrator.domain.states import PaymentStatus
from tests.unit.records import a_record


def jsonb_order(document: dict[str, object]) -> dict[str, object]:
    """What PostgreSQL's JSONB gives back: keys sorted by length, then bytes, recursively."""
    return {
        key: jsonb_order(value) if isinstance(value, dict) else value  # type: ignore[arg-type]
        for key, value in sorted(document.items(), key=lambda kv: (len(kv[0]), kv[0]))
    }


def failed_record():
    return a_record(
        status=PaymentStatus.FAILED,
        failure=Failure(code="card_declined", message="Déclinée", decline_code="generic"),
    )


def test_the_representation_has_the_documented_field_order():
    assert tuple(payment_representation(a_record())) == PAYMENT_FIELDS


def test_metadata_is_sorted_whatever_order_the_request_used():
    body = payment_representation(a_record())
    assert list(body["metadata"]) == ["alpha", "mid", "zeta"]


def test_encoding_is_compact_utf8_like_starlettes_json_response():
    encoded = encode_representation(payment_representation(failed_record()))
    assert b": " not in encoded and b", " not in encoded
    assert "Déclinée".encode() in encoded
    assert json.loads(encoded) == payment_representation(failed_record())


def test_a_document_read_back_from_jsonb_encodes_to_the_same_bytes():
    built = payment_representation(failed_record())
    from_jsonb = jsonb_order(built)
    assert list(from_jsonb) != list(built)  # the hazard is real
    assert encode_representation(canonical_payment(from_jsonb)) == encode_representation(built)


def test_any_key_order_canonicalises_to_one_encoding():
    built = payment_representation(failed_record())
    rng = random.Random(7)
    for _ in range(20):
        items = list(built.items())
        rng.shuffle(items)
        shuffled = dict(items)
        assert encode_representation(canonical_payment(shuffled)) == encode_representation(built)


def test_unknown_fields_land_after_the_known_ones_in_sorted_order():
    document = {"zz": 1, "aa": 2, **payment_representation(a_record())}
    assert list(canonical_payment(document))[-2:] == ["aa", "zz"]
