"""Routing rules, pure (domain.routing): shape validation naming the field, first match
wins on every condition, weighted splits deterministic per payment id, and the accounts a
payment skips at accept."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.routing import (
    PLATFORM_ACCOUNT,
    SKIP_DISABLED,
    InvalidConfiguration,
    PaymentFacts,
    Skip,
    Split,
    account_errors,
    evaluate,
    implicit_configuration,
    parse_configuration,
    pick_split,
    split_bucket,
    usable_route,
)

A = "ca_" + "a" * 24
B = "ca_" + "b" * 24
C = "ca_" + "c" * 24

CONTRACT_EXAMPLE: dict[str, Any] = {
    "rules": [
        {"name": "eur-to-adyen", "if": {"currency": ["eur"]}, "then": [A, B]},
        {"name": "big-tickets", "if": {"amount_gte": 100000}, "then": [B]},
        {
            "name": "ab-test",
            "if": {},
            "split": [{"weight": 80, "then": [B, A]}, {"weight": 20, "then": [A, B]}],
        },
    ],
    "default": [B],
}


def facts(**given: Any) -> PaymentFacts:
    given.setdefault("amount", 1000)
    given.setdefault("currency", "usd")
    return PaymentFacts(**given)


def fields_of(document: Any) -> list[str]:
    with pytest.raises(InvalidConfiguration) as refused:
        parse_configuration(document)
    return [e.field for e in refused.value.errors]


def test_the_contract_example_parses_and_reads_back_as_sent() -> None:
    configuration = parse_configuration(CONTRACT_EXAMPLE)
    assert configuration.document() == CONTRACT_EXAMPLE
    assert configuration.accounts() == (A, B)


def test_the_first_matching_rule_wins() -> None:
    configuration = parse_configuration(CONTRACT_EXAMPLE)
    eur_big = evaluate(configuration, facts(currency="eur", amount=500000), "pay_1")
    usd_big = evaluate(configuration, facts(amount=100000), "pay_1")
    assert (eur_big.route, eur_big.rule) == ((A, B), "eur-to-adyen")
    assert (usd_big.route, usd_big.rule) == ((B,), "big-tickets")


def test_no_matching_rule_takes_the_default_with_no_rule_named() -> None:
    configuration = parse_configuration(
        {"rules": [{"name": "eur", "if": {"currency": ["EUR"]}, "then": [A]}], "default": [B]}
    )
    assert evaluate(configuration, facts(currency="usd"), "pay_1").route == (B,)
    assert evaluate(configuration, facts(currency="usd"), "pay_1").rule is None
    assert evaluate(configuration, facts(currency="eur"), "pay_1").route == (A,)


@pytest.mark.parametrize(
    ("condition", "matching", "not_matching"),
    [
        ({"amount_gte": 1000}, {"amount": 1000}, {"amount": 999}),
        ({"amount_lt": 1000}, {"amount": 999}, {"amount": 1000}),
        ({"capture_method": "manual"}, {"capture_method": "manual"}, {}),
        ({"off_session": True}, {"off_session": True}, {"off_session": None}),
        ({"off_session": False}, {"off_session": None}, {"off_session": True}),
        (
            {"metadata": {"channel": "web"}},
            {"metadata": {"channel": "web", "x": "y"}},
            {"metadata": {"channel": "app"}},
        ),
        (
            {"currency": ["eur", "gbp"], "amount_lt": 5000},
            {"currency": "gbp", "amount": 4999},
            {"currency": "gbp", "amount": 5000},
        ),
    ],
)
def test_every_condition_must_hold(
    condition: dict[str, Any], matching: dict[str, Any], not_matching: dict[str, Any]
) -> None:
    configuration = parse_configuration(
        {"rules": [{"name": "r", "if": condition, "then": [A]}], "default": [B]}
    )
    assert evaluate(configuration, facts(**matching), "pay_1").rule == "r"
    assert evaluate(configuration, facts(**not_matching), "pay_1").rule is None


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"rules": [], "default": []}, ["default"]),
        ({"rules": []}, ["default"]),
        ({"rules": [{"name": "r", "if": {}, "then": []}], "default": [A]}, ["rules[0].then"]),
        (
            {
                "rules": [
                    {"name": "a", "then": [A]},
                    {"name": "b", "then": [A]},
                    {
                        "name": "c",
                        "split": [{"weight": 70, "then": [A]}, {"weight": 20, "then": [B]}],
                    },
                ],
                "default": [A],
            },
            ["rules[2].split"],
        ),
        (
            {"rules": [{"name": "r", "if": {"country": ["de"]}, "then": [A]}], "default": [A]},
            ["rules[0].if.country"],
        ),
        (
            {"rules": [{"name": "r", "then": [A]}, {"name": "r", "then": [B]}], "default": [A]},
            ["rules[1].name"],
        ),
        ({"rules": [{"name": "r", "then": [A], "split": []}], "default": [A]}, ["rules[0]"]),
        ({"rules": [{"name": "r", "then": ["acct_1"]}], "default": [A]}, ["rules[0].then[0]"]),
        ({"rules": [], "default": [A, A]}, ["default[1]"]),
        (
            {
                "rules": [{"name": "r", "if": {"amount_gte": 10, "amount_lt": 10}, "then": [A]}],
                "default": [A],
            },
            ["rules[0].if.amount_lt"],
        ),
        (
            {"rules": [{"name": "r", "split": [{"weight": 0, "then": [A]}]}], "default": [A]},
            ["rules[0].split[0].weight"],
        ),
        ({"rules": [], "default": [A], "fallback": [B]}, ["fallback"]),
    ],
)
def test_an_invalid_configuration_names_each_field_to_fix(
    document: dict[str, Any], expected: list[str]
) -> None:
    assert fields_of(document) == expected


def test_accounts_unknown_another_merchants_or_disabled_are_named_with_their_path() -> None:
    configuration = parse_configuration(
        {
            "rules": [
                {"name": "r", "split": [{"weight": 50, "then": [A]}, {"weight": 50, "then": [C]}]}
            ],
            "default": [B, PLATFORM_ACCOUNT],
        }
    )
    # C is not in the merchant's own accounts (unknown, or another merchant's: the same
    # answer, so a merchant learns nothing of other merchants' ids).
    errors = account_errors(configuration, {A: True, B: False})
    assert [(e.field, e.message.split(" ", 2)[2]) for e in errors] == [
        ("rules[0].split[1].then[0]", "not one of your connector accounts"),
        ("default[0]", "disabled: enable another or remove it"),
    ]


def test_the_implicit_configuration_routes_to_the_default_account_else_the_platform() -> None:
    assert implicit_configuration(A).document() == {"rules": [], "default": [A]}
    assert implicit_configuration(None).document() == {"rules": [], "default": ["platform"]}


def test_the_split_bucket_is_a_stable_hash_not_pythons_salted_one() -> None:
    # The same id in another interpreter (another PYTHONHASHSEED) lands in the same bucket.
    script = "from orchestrator.domain.routing import split_bucket; print(split_bucket('pay_x'))"
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert int(other.stdout) == split_bucket("pay_x")


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=99))
def test_a_split_picks_the_same_part_for_the_same_payment_every_time(
    payment_id: str, weight: int
) -> None:
    parts = (Split(weight, (A,)), Split(100 - weight, (B,)))
    first = pick_split(parts, payment_id)
    assert all(pick_split(parts, payment_id) == first for _ in range(3))
    assert (first.then == (A,)) == (split_bucket(payment_id) < weight)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=99))
def test_a_split_sends_about_its_weight_of_payments_to_each_part(weight: int) -> None:
    parts = (Split(weight, (A,)), Split(100 - weight, (B,)))
    ids = [f"pay_{n:032x}" for n in range(4000)]
    share = sum(pick_split(parts, i).then == (A,) for i in ids) / len(ids)
    # 4000 draws: the share's standard deviation is at most 0.8 points; 4 points is > 5 sd.
    assert abs(share - weight / 100) < 0.04


def test_accounts_disabled_since_or_without_a_method_are_skipped_in_order() -> None:
    reasons = {A: SKIP_DISABLED, C: "no_payment_method"}
    resolved = usable_route((A, B, C, PLATFORM_ACCOUNT), reasons.get)
    assert resolved.route == (B, PLATFORM_ACCOUNT)
    assert resolved.skipped == (Skip(A, SKIP_DISABLED), Skip(C, "no_payment_method"))
