"""The Adyen simulator's fault rules: the Stripe simulator's syntax with Adyen's operations,
and its command line (``python -m devtools.adyen_simulator``)."""

from __future__ import annotations

import pytest

from devtools.adyen_simulator.__main__ import build_config
from devtools.adyen_simulator.faults import FaultBook, FaultRule, parse_fault_spec
from devtools.simulator.faults import parse_fault_spec as parse_stripe_spec


@pytest.mark.parametrize(
    "spec",
    [
        "payments:timeout_after_effect:times=1",
        "payments:error_500_before:status=503",
        "capture:error_500_after:amounts=1313",
        "any:latency:seconds=0.05",
        "refund:rate_limit:0.2:retry_after=2",
        "details:hang:times=1",
        "payments:hold:amounts=100007:times=1",
        "payments:hold:seconds=0.3",
        "payments:idempotency_unavailable:times=2",
        "technical_cancel:error_500_before",
        "webhook:duplicate",
        "webhook:delay:seconds=2.0",
    ],
)
def test_a_spec_round_trips(spec: str) -> None:
    rule = parse_fault_spec(spec)
    assert parse_fault_spec(rule.to_spec()) == rule
    assert FaultRule.from_json(rule.to_json()) == rule


def test_notification_is_a_synonym_of_webhook() -> None:
    assert parse_fault_spec("notification:drop:times=1") == parse_fault_spec("webhook:drop:times=1")


def test_the_modes_are_the_stripe_simulators() -> None:
    for mode in (
        "latency:seconds=1",
        "timeout_after_effect",
        "error_500_before",
        "error_500_after",
        "rate_limit",
        "hang",
    ):
        assert parse_fault_spec(f"any:{mode}").mode == parse_stripe_spec(f"any:{mode}").mode
    for mode in ("drop", "duplicate", "reorder", "delay"):
        assert parse_fault_spec(f"webhook:{mode}").mode == parse_stripe_spec(f"webhook:{mode}").mode


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("confirm:latency:seconds=1", "unknown operation"),
        ("payments:explode", "unknown fault mode"),
        ("payments:drop", "webhook takes"),
        ("webhook:latency:seconds=1", "webhook takes"),
        ("payments:latency", "needs seconds"),
        ("payments:error_500_before:status=404", "5xx"),
        ("payments:error_500_before:colour=red", "unknown key"),
        ("payments", "OP:MODE"),
    ],
)
def test_bad_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fault_spec(spec)


def test_the_book_fires_in_order_by_operation_amount_and_times() -> None:
    book = FaultBook()
    book.add(parse_fault_spec("payments:error_500_before:amounts=1313:times=1"))
    book.add(parse_fault_spec("any:latency:seconds=0"))
    book.add(parse_fault_spec("webhook:drop"))
    first = book.pick("payments", 1313)
    assert first is not None and first.mode == "error_500_before"
    second = book.pick("payments", 1313)
    assert second is not None and second.mode == "latency"
    third = book.pick("webhook", 1313)
    assert third is not None and third.mode == "drop"
    assert [r["fired"] for r in book.rules()] == [1, 1, 1]


def test_the_command_line_builds_the_config() -> None:
    config, host, port = build_config(
        [
            "--port",
            "0",
            "--fault",
            "payments:hang:times=1",
            "--notification-url",
            "http://127.0.0.1:9/n",
            "--hmac-key",
            "00ff",
        ]
    )
    assert (host, port) == ("127.0.0.1", 0)
    assert [r.to_spec() for r in config.faults] == ["payments:hang:times=1"]
    assert (config.notification_url, config.hmac_key) == ("http://127.0.0.1:9/n", "00ff")
    with pytest.raises(SystemExit):
        build_config(["--fault", "payments:nope"])
    with pytest.raises(SystemExit):
        build_config(["--hmac-key", "00ff"])
