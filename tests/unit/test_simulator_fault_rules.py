"""Fault rules: the text syntax of ``--fault`` and the seeded book that applies them."""

from __future__ import annotations

import pytest

from devtools.simulator.faults import FaultBook, FaultRule, parse_fault_spec


def test_a_spec_names_operation_mode_probability_and_options() -> None:
    rule = parse_fault_spec("confirm:timeout_after_effect:0.1:amounts=1313,2000:times=3:seconds=2")

    assert rule == FaultRule(
        operation="confirm",
        mode="timeout_after_effect",
        probability=0.1,
        amounts=frozenset({1313, 2000}),
        times=3,
        seconds=2.0,
    )


def test_a_spec_round_trips_through_its_canonical_text() -> None:
    for spec in (
        "confirm:timeout_after_effect:0.1",
        "any:latency:seconds=0.05",
        "create:rate_limit:0.2:retry_after=2",
        "confirm:error_500_after:amounts=1313",
        "confirm:hang:times=1",
    ):
        assert parse_fault_spec(parse_fault_spec(spec).to_spec()) == parse_fault_spec(spec)


def test_a_rule_survives_the_admin_apis_json() -> None:
    rule = parse_fault_spec("retrieve:error_500_before:p=0.5:amounts=7")

    assert FaultRule.from_json(rule.to_json()) == rule
    assert FaultRule.from_json({"spec": "confirm:hang"}) == parse_fault_spec("confirm:hang")


@pytest.mark.parametrize(
    "spec",
    [
        "confirm",
        "confirm:latency",
        "refund:latency",
        "confirm:explode",
        "confirm:latency:2.0",
        "confirm:latency:times=0",
        "confirm:latency:colour=red",
        "confirm:latency:0.5:0.5",
        "confirm:latency:amounts=ten",
    ],
)
def test_a_malformed_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match=r"fault|probability|times|operation|mode|seconds"):
        parse_fault_spec(spec)


def test_the_first_matching_rule_decides_and_a_limited_rule_is_spent() -> None:
    book = FaultBook()
    book.add(parse_fault_spec("confirm:rate_limit:times=1"))
    book.add(parse_fault_spec("any:latency:seconds=0.1"))

    picks = [book.pick("confirm", 1000) for _ in range(2)]

    assert [p.mode if p else None for p in picks] == ["rate_limit", "latency"]
    assert book.pick("create", None) is not None  # "any" matches every operation


def test_an_amount_rule_ignores_other_amounts_and_requests_without_one() -> None:
    book = FaultBook()
    book.add(parse_fault_spec("any:error_500_before:amounts=1313"))

    assert book.pick("confirm", 1313) is not None
    assert book.pick("confirm", 1314) is None
    assert book.pick("list", None) is None


def test_the_same_seed_injects_the_same_faults() -> None:
    def run(seed: int) -> list[bool]:
        book = FaultBook(seed=seed)
        book.add(parse_fault_spec("confirm:error_500_before:0.5"))
        return [book.pick("confirm", 100) is not None for _ in range(64)]

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert 10 < sum(run(7)) < 54  # roughly half, not all or nothing


@pytest.mark.parametrize(
    "spec", ["webhook:latency:seconds=1", "confirm:drop", "any:duplicate", "webhook:hang"]
)
def test_webhook_modes_go_with_the_webhook_operation_only(spec: str) -> None:
    with pytest.raises(ValueError, match="webhook"):
        parse_fault_spec(spec)


def test_a_webhook_rule_never_fires_for_a_request_and_any_never_for_a_webhook() -> None:
    book = FaultBook(seed=1)
    book.add(parse_fault_spec("webhook:reorder"))
    book.add(parse_fault_spec("any:rate_limit"))

    request = book.pick("confirm", None)
    webhook = book.pick("webhook", None)

    assert request is not None and request.mode == "rate_limit"
    assert webhook is not None and webhook.mode == "reorder"
    assert parse_fault_spec("webhook:delay:seconds=2").seconds == 2.0
