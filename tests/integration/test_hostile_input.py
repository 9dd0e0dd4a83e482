"""Hostile input gets a clear 4xx problem and stores nothing (issue 7), over real HTTP on
SQLite and PostgreSQL.

"Stores nothing" is checked the strongest way the contract allows: no record exists, and
the same Idempotency-Key with a valid body afterwards starts a new payment (202, not a
replay), so a refused request never burns the key.

Requests that are not valid HTTP at all (a control character other than tab in a header
value) are refused by the HTTP server before the application sees them: a plain
``400 Bad Request``, and nothing stored either.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.hardening_helpers import (
    BODY,
    Api,
    assert_problem,
    post_payment,
    running_api,
    sqlite_url,
)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path_factory.mktemp("hostile"))
    else:
        url = request.getfixturevalue("make_postgres_database")()
    with running_api(url) as running:
        yield running


def _raw_json(**fields: str) -> str:
    """The valid body with some members replaced by raw JSON text (escapes kept as sent)."""
    members = {key: json.dumps(value) for key, value in BODY.items()}
    members.update(fields)
    return "{" + ", ".join(f'"{key}": {value}' for key, value in members.items()) + "}"


def _assert_key_still_free(api: Api, client: httpx.Client, key: str) -> None:
    assert api.count(idempotency_key=key) == 0
    fixed = post_payment(client, key)
    assert fixed.status_code == 202, fixed.text
    assert "Idempotent-Replayed" not in fixed.headers


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_BODIES: dict[str, bytes | str] = {
    # Encoding
    "invalid UTF-8": _raw_json(description='"caf\udcc3"').encode("utf-8", "surrogateescape"),
    "a latin-1 body": _raw_json(description='"café"').encode("latin-1"),
    "UTF-16": json.dumps(BODY).encode("utf-16"),
    "a byte order mark": b"\xef\xbb\xbf" + json.dumps(BODY).encode(),
    # Strings PostgreSQL cannot store, or that break logs and terminals
    "NUL in description": _raw_json(description=r'"a\u0000b"'),
    "NUL in a metadata value": _raw_json(metadata=r'{"order": "a\u0000b"}'),
    "NUL in a metadata key": _raw_json(metadata=r'{"or\u0000der": "1"}'),
    "NUL in customer_reference": _raw_json(customer_reference=r'"c\u0000"'),
    "NUL in payment_method": _raw_json(payment_method=r'"pm_card_visa\u0000"'),
    "a lone surrogate in description": _raw_json(description=r'"\ud800"'),
    "a lone surrogate in a metadata key": _raw_json(metadata=r'{"\ud800": "x"}'),
    "a lone surrogate in a metadata value": _raw_json(metadata=r'{"k": "\udfff"}'),
    "a lone surrogate in customer_reference": _raw_json(customer_reference=r'"\ud800"'),
    "a lone surrogate in currency": _raw_json(currency=r'"\ud800sd"'),
    "a lone surrogate as a field name": _raw_json(**{r"\ud800": "1"}),
    "a bell in description": _raw_json(description=r'"ding\u0007"'),
    "a C1 control in description": _raw_json(description=r'"next\u0085line"'),
    "a raw newline inside a string": _raw_json(description='"two\nlines"'),
    "a line break in customer_reference": _raw_json(customer_reference=r'"c\nd"'),
    # Numbers
    "amount 1e400 (infinity)": _raw_json(amount="1e400"),
    "amount with 5000 digits": _raw_json(amount="9" * 5000),
    "amount 10^20": _raw_json(amount=str(10**20)),
    "amount 99,999,999 + 1": _raw_json(amount="100000000"),
    "amount 0": _raw_json(amount="0"),
    "a negative amount": _raw_json(amount="-1999"),
    "a fractional amount": _raw_json(amount="1999.5"),
    "a tiny fractional amount": _raw_json(amount="0.5"),
    "amount as a string": _raw_json(amount='"1999"'),
    "amount true": _raw_json(amount="true"),
    "amount null": _raw_json(amount="null"),
    "NaN": _raw_json(amount="NaN"),
    "Infinity": _raw_json(amount="Infinity"),
    # Currency
    "an unknown currency": _raw_json(currency='"zzz"'),
    "a two-letter currency": _raw_json(currency='"us"'),
    "a four-letter currency": _raw_json(currency='"usdd"'),
    "a currency with a Kelvin sign": _raw_json(currency='"\u212arw"'),
    "a currency with padding": _raw_json(currency='" usd"'),
    # Metadata
    "51 metadata keys": _raw_json(metadata=json.dumps({f"k{i}": "v" for i in range(51)})),
    "a 41-character metadata key": _raw_json(metadata=json.dumps({"k" * 41: "v"})),
    "a 501-character metadata value": _raw_json(metadata=json.dumps({"k": "v" * 501})),
    "square brackets in a metadata key": _raw_json(metadata='{"a[b]": "v"}'),
    "an empty metadata key": _raw_json(metadata='{"": "v"}'),
    "a number as a metadata value": _raw_json(metadata='{"k": 1}'),
    "nested metadata": _raw_json(metadata='{"k": {"deeper": "v"}}'),
    "deeply nested metadata": _raw_json(metadata='{"k": ' + _nested(10_000) + "}"),
    "metadata as a list": _raw_json(metadata='["k", "v"]'),
    # Structure
    "a body nested 30,000 deep": _nested(30_000),
    "an unknown field": _raw_json(surprise="1"),
    "a duplicate field": '{"amount": 1999, "amount": 5, "currency": "usd", '
    '"payment_method": "pm_card_visa"}',
    "a duplicate metadata key": _raw_json(metadata='{"k": "1", "k": "2"}'),
    "a list body": json.dumps([BODY]),
    "a null body": "null",
    "a string body": '"pay me"',
    "a number body": "1999",
    "an empty body": "",
    "trailing garbage": json.dumps(BODY) + " x",
    "two documents": json.dumps(BODY) + json.dumps(BODY),
    "a description over 1000 characters": _raw_json(description=json.dumps("d" * 1001)),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_an_invalid_body_is_a_400_problem_and_stores_nothing(api: Api, case: str) -> None:
    key = f"hostile-body-{list(BAD_BODIES).index(case)}"
    before = api.count()
    with api.client() as client:
        assert_problem(post_payment(client, key, BAD_BODIES[case]), 400, "invalid-request")
        assert api.count() == before
        _assert_key_still_free(api, client, key)


@pytest.mark.parametrize(
    ("case", "body", "field"),
    [
        ("unknown field", {**BODY, "surprise": 1}, "surprise"),
        ("negative amount", {**BODY, "amount": -5}, "amount"),
        ("absurd amount", {**BODY, "amount": 10**12}, "amount"),
        ("51 metadata keys", {**BODY, "metadata": {f"k{i}": "v" for i in range(51)}}, "metadata"),
        ("bad currency", {**BODY, "currency": "zzz"}, "currency"),
    ],
)
def test_a_field_problem_names_the_field(
    api: Api, case: str, body: dict[str, Any], field: str
) -> None:
    with api.client() as client:
        problem = assert_problem(
            post_payment(client, f"field-{field}", body), 400, "invalid-request"
        )
    assert field in [error["field"] for error in problem["errors"]], case


def test_the_largest_amount_stripe_accepts_is_accepted(api: Api) -> None:
    with api.client() as client:
        response = post_payment(client, "largest-amount", {**BODY, "amount": 99_999_999})
    assert response.status_code == 202
    assert response.json()["amount"] == 99_999_999


def test_an_integral_number_is_that_integer_and_the_same_request(api: Api) -> None:
    """JSON has one number type (and JSON Schema's ``integer`` agrees): 1999.0 is 1999."""
    with api.client() as client:
        plain = post_payment(client, "integral-amount", _raw_json(amount="1999"))
        decimal = post_payment(client, "integral-amount", _raw_json(amount="1999.0"))
        exponent = post_payment(client, "integral-amount", _raw_json(amount="1.999e3"))
    assert plain.status_code == 202
    assert decimal.headers["Idempotent-Replayed"] == exponent.headers["Idempotent-Replayed"]
    assert decimal.json()["id"] == exponent.json()["id"] == plain.json()["id"]
    assert plain.json()["amount"] == 1999


def test_currency_is_case_insensitive_and_stored_lower_case(api: Api) -> None:
    with api.client() as client:
        upper = post_payment(client, "currency-case", {**BODY, "currency": "USD"})
        lower = post_payment(client, "currency-case", {**BODY, "currency": "usd"})
        mixed = post_payment(client, "currency-case", {**BODY, "currency": "uSd"})
    assert upper.status_code == 202
    assert upper.json()["currency"] == "usd"
    # One request, whatever the case: replays, not a 422 key reuse.
    assert lower.status_code == mixed.status_code == 202
    assert lower.headers["Idempotent-Replayed"] == mixed.headers["Idempotent-Replayed"] == "true"
    assert lower.json()["id"] == mixed.json()["id"] == upper.json()["id"]


def test_metadata_at_the_limits_is_accepted(api: Api) -> None:
    metadata = {f"{n:02d}".ljust(40, "k"): "v" * 500 for n in range(50)}
    with api.client() as client:
        response = post_payment(client, "metadata-limits", {**BODY, "metadata": metadata})
    assert response.status_code == 202, response.text
    assert response.json()["metadata"] == metadata


def test_a_body_over_64_kib_is_413_and_stores_nothing(api: Api) -> None:
    metadata = {f"k{n}": "v" * 500 for n in range(200)}  # ~100 KiB
    with api.client() as client:
        assert_problem(
            post_payment(client, "huge-metadata", {**BODY, "metadata": metadata}),
            413,
            "payload-too-large",
        )
        _assert_key_still_free(api, client, "huge-metadata")


def test_a_declared_length_over_64_kib_is_413_before_the_body_is_read(api: Api) -> None:
    request = (
        b"POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + api.key_a.encode()
        + b"\r\nIdempotency-Key: declared-huge\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10000000\r\nConnection: close\r\n\r\n{}"
    )
    answer = api.raw(request)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"application/problem+json" in answer
    assert api.count(idempotency_key="declared-huge") == 0


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "json"],
)
def test_a_body_that_is_not_declared_json_is_415(api: Api, content_type: str | None) -> None:
    key = f"content-type-{content_type}"
    with api.client() as client:
        response = post_payment(client, key, json.dumps(BODY), content_type=content_type)
        assert_problem(response, 415, "unsupported-media-type")
        _assert_key_still_free(api, client, key)


def test_json_with_parameters_or_upper_case_is_json(api: Api) -> None:
    with api.client() as client:
        response = post_payment(
            client, "json-charset", BODY, content_type="Application/JSON; charset=utf-8"
        )
    assert response.status_code == 202


# Idempotency-Key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "case"),
    [
        (b"k" * 256, "256 characters"),
        (b"", "empty"),
        (b"caf\xc3\xa9", "non-ASCII (UTF-8)"),
        (b"\xff\xfe", "non-ASCII (latin-1 bytes)"),
        (b"tab\there", "a tab (legal in HTTP, not in a key)"),
        (b"k" * 10_000, "10,000 characters"),
    ],
)
def test_a_malformed_idempotency_key_is_a_400_problem(api: Api, key: bytes, case: str) -> None:
    before = api.count()
    with api.client() as client:
        response = post_payment(client, key)
    assert_problem(response, 400, "invalid-idempotency-key")
    assert api.count() == before, case


def test_a_missing_idempotency_key_is_a_400_problem(api: Api) -> None:
    before = api.count()
    with api.client() as client:
        assert_problem(post_payment(client, None), 400, "invalid-idempotency-key")
    assert api.count() == before


@pytest.mark.parametrize("control", [b"\x00", b"\x01", b"\x1b", b"\x7f", b"\r"])
def test_a_control_character_in_the_key_is_refused_by_the_http_server(
    api: Api, control: bytes
) -> None:
    body = json.dumps(BODY).encode()
    request = (
        b"POST /v1/payments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + api.key_a.encode()
        + b"\r\nIdempotency-Key: ctl"
        + control
        + b"key\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )
    before = api.count()
    answer = api.raw(request)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"Traceback" not in answer
    assert api.count() == before


# Headers, paths and query strings ----------------------------------------------------------


def test_very_long_header_values_are_refused_clearly(api: Api) -> None:
    before = api.count()
    with api.client() as client:
        other = post_payment(client, "long-header", headers={"X-Padding": "p" * 20_000})
        assert_problem(other, 431, "request-header-too-large")
        many = post_payment(
            client, "many-headers", headers={f"X-Pad-{n}": "p" * 900 for n in range(20)}
        )
        assert_problem(many, 431, "request-header-too-large")
    with httpx.Client(base_url=api.url, trust_env=False) as anonymous:
        long_auth = anonymous.post(
            "/v1/payments",
            json=BODY,
            headers={"Authorization": "Bearer pok_" + "a" * 8_000, "Idempotency-Key": "x"},
        )
    assert_problem(long_auth, 401, "unauthorized")
    assert api.count() == before


def test_a_long_request_id_is_replaced_not_echoed(api: Api) -> None:
    with api.client() as client:
        response = client.get("/healthz", headers={"X-Request-Id": "r" * 5_000})
    assert response.status_code == 200
    assert len(response.headers["X-Request-Id"]) <= 64


@pytest.mark.parametrize(
    "path",
    [
        "/v1/payments/%00",
        "/v1/payments/pay_%00",
        "/v1/payments?idempotency_key=%00",
        "/v1/payments?idempotency_key=a%0Ab",
        "/v1/payments?idempotency_key=%1B%5B31m",
    ],
)
def test_control_characters_in_the_url_are_a_400_problem(api: Api, path: str) -> None:
    with api.client() as client:
        assert_problem(client.get(path), 400, "invalid-request")


def test_control_characters_in_an_ops_url_are_a_400_problem(api: Api) -> None:
    with api.client(api.ops_key) as client:
        response = client.post("/v1/ops/payments/%00/takeover", json={"reason": "x"})
    assert_problem(response, 400, "invalid-request")


@pytest.mark.parametrize(
    "payment_id",
    ["x" * 10_000, "pay_%ED%A0%80", "%FF%FE", "pay_" + "0" * 31 + "g", "PAY_" + "0" * 32],
)
def test_an_impossible_payment_id_is_404(api: Api, payment_id: str) -> None:
    with api.client() as client:
        assert_problem(client.get(f"/v1/payments/{payment_id}"), 404, "not-found")


@pytest.mark.parametrize(
    "query", ["idempotency_key=caf%C3%A9", "idempotency_key=%FF", "idempotency_key=" + "k" * 256]
)
def test_looking_up_an_impossible_key_is_a_400_problem(api: Api, query: str) -> None:
    with api.client() as client:
        assert_problem(client.get(f"/v1/payments?{query}"), 400, "invalid-idempotency-key")
