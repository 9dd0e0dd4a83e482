"""The Part 2 fields of POST /v1/payments: customer, off_session, return_url, and Stripe's
minimum charge amounts, checked before anything is stored."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.api.schemas import PaymentCreate
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.minimums import MINIMUM_CHARGE_AMOUNTS, minimum_charge_amount

BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}


def parse(**fields: object) -> PaymentCreate:
    return PaymentCreate.model_validate({**BODY, **fields})


def test_the_minimum_table_is_stripes_for_the_usual_currencies() -> None:
    assert minimum_charge_amount("usd") == 50
    assert minimum_charge_amount("GBP") == 30
    assert minimum_charge_amount("jpy") == 50  # zero-decimal: ¥50
    assert minimum_charge_amount("huf") == 17500
    # Stripe's rule elsewhere is an exchange-rate equivalent: not checked here.
    assert minimum_charge_amount("isk") is None
    assert all(amount > 0 for amount in MINIMUM_CHARGE_AMOUNTS.values())


@pytest.mark.parametrize(("currency", "minimum"), sorted(MINIMUM_CHARGE_AMOUNTS.items()))
def test_an_amount_one_below_the_minimum_is_refused_on_the_amount_field(
    currency: str, minimum: int
) -> None:
    assert parse(amount=minimum, currency=currency).rule_errors() == []
    errors = parse(amount=minimum - 1, currency=currency).rule_errors()
    assert [e["field"] for e in errors] == ["amount"]
    assert str(minimum) in errors[0]["message"]
    assert currency.upper() in errors[0]["message"]


def test_a_customer_must_be_a_stripe_customer_id() -> None:
    assert parse(customer="cus_NffrFeUfNV2Hib").customer == "cus_NffrFeUfNV2Hib"
    for bad in ("cust_1", "cus_", "cus_a b", "pm_card_visa", 7):
        with pytest.raises(ValidationError) as raised:
            parse(customer=bad)
        assert raised.value.errors()[0]["loc"] == ("customer",)


def test_off_session_is_a_strict_boolean() -> None:
    for bad in ("true", 1, "yes"):
        with pytest.raises(ValidationError):
            parse(off_session=bad)


def test_a_return_url_must_be_an_absolute_http_url() -> None:
    ok = parse(off_session=False, return_url="https://shop.example/done?o=1")
    assert ok.return_url == "https://shop.example/done?o=1"
    for bad in ("/done", "javascript:alert(1)", "ftp://x.example/", "https://", "https://a\n.b/"):
        with pytest.raises(ValidationError) as raised:
            parse(return_url=bad)
        assert raised.value.errors()[0]["loc"] == ("return_url",)


def test_an_on_session_payment_needs_a_return_url_and_an_off_session_one_refuses_it() -> None:
    assert [e["field"] for e in parse(off_session=False).rule_errors()] == ["return_url"]
    both = parse(off_session=True, return_url="https://shop.example/done").rule_errors()
    assert [e["field"] for e in both] == ["return_url"]
    assert parse(off_session=True).rule_errors() == []
    # Not said (a Part 1 body): no return URL needed.
    assert parse().rule_errors() == []


def test_a_body_without_the_new_fields_fingerprints_as_it_did_before_they_existed() -> None:
    before = {
        **BODY,
        "customer_reference": None,
        "description": None,
        "metadata": {},
    }
    assert request_fingerprint("POST", "/v1/payments", parse().fingerprint_body()) == (
        request_fingerprint("POST", "/v1/payments", before)
    )


def test_each_new_field_is_part_of_the_fingerprint() -> None:
    def fp(**fields: object) -> str:
        return request_fingerprint("POST", "/v1/payments", parse(**fields).fingerprint_body())

    seen = {
        fp(),
        fp(customer="cus_A1"),
        fp(customer="cus_B2"),
        fp(off_session=True),
        fp(off_session=False, return_url="https://a.example/"),
        fp(off_session=False, return_url="https://b.example/"),
    }
    assert len(seen) == 6


def test_the_domain_request_carries_the_new_fields() -> None:
    request = parse(
        customer="cus_A1", off_session=False, return_url="https://a.example/r"
    ).to_domain()
    assert (request.customer, request.off_session, request.return_url) == (
        "cus_A1",
        False,
        "https://a.example/r",
    )


def test_the_documented_table_is_the_code_table() -> None:
    """The API docs repeat the minimums: the two must not drift apart."""
    page = (Path(__file__).parents[2] / "docs" / "api" / "payments.md").read_text(encoding="utf-8")
    section = page.split("### Minimum amounts", 1)[1].split("\n#", 1)[0]
    documented = {
        currency.lower(): int(amount)
        for currency, amount in re.findall(r"\| ([A-Z]{3}) \| (\d+)", section)
    }
    assert documented == dict(MINIMUM_CHARGE_AMOUNTS)
