"""Scenario 9's verdicts and options, without running the outage (bench/outage_verdict.py,
bench/run.py): what passes, what is a miss, and what an unmeasured figure counts as."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench import report
from bench.outage_verdict import parse_variants, probes_allowed, verdict
from bench.run import SCENARIOS, options_from_cli


def healthy_run() -> dict[str, Any]:
    """One variant's figures where every criterion holds."""
    return {
        "rate": 10.0,
        "outage_seconds": 180.0,
        "accepted": 2000,
        "parked": {"max_seen": 0, "at_end": 0, "payments": []},
        "succeeded": 2000,
        "charged_twice": 0,
        "not_charged": 0,
        "provider_calls": {
            "during_outage": 40,
            "before_open": 21,
            "after_open": 19,
            "probes_allowed": 46,
            "circuit_first_opened_after_seconds": 2.1,
        },
        "pool_per_second": 150.0,
        "recovery_to_last_done_seconds": 25.0,
        "drain": {"per_second": 140.0, "ratio": 0.933},
        "messages_per_payment": 1.05,
    }


def test_a_run_meeting_every_criterion_passes_each_of_them() -> None:
    assert verdict(healthy_run()) == {
        "parked": True,
        "succeeded": True,
        "charged_twice": True,
        "calls_within_probes": True,
        "drain": True,
        "messages": True,
    }


@pytest.mark.parametrize(
    ("change", "criterion"),
    [
        (lambda f: f["parked"].update(max_seen=3), "parked"),
        # Parked during the run and retried by nobody: still at the end.
        (lambda f: f["parked"].update(at_end=1), "parked"),
        (lambda f: f.update(succeeded=1999), "succeeded"),
        (lambda f: f.update(charged_twice=1), "charged_twice"),
        (lambda f: f.update(not_charged=1), "charged_twice"),
        (lambda f: f["provider_calls"].update(after_open=47), "calls_within_probes"),
        (lambda f: f["drain"].update(ratio=0.5), "drain"),
        (lambda f: f.update(messages_per_payment=1.3), "messages"),
    ],
)
def test_each_criterion_misses_on_its_own_figure(change: Any, criterion: str) -> None:
    figures = copy.deepcopy(healthy_run())
    change(figures)

    judged = verdict(figures)

    assert judged[criterion] is False
    assert [name for name, ok in judged.items() if not ok] == [criterion]


def test_what_the_run_could_not_measure_is_a_miss_not_a_pass() -> None:
    figures = copy.deepcopy(healthy_run())
    # The circuit never opened (no call after it), the drain had no rate, nothing arrived.
    figures["provider_calls"].update(after_open=None, probes_allowed=0)
    figures["drain"].update(ratio=None)
    figures.update(accepted=0, succeeded=0)

    judged = verdict(figures)

    assert not judged["calls_within_probes"]
    assert not judged["drain"]
    assert not judged["succeeded"]


def test_probes_allowed_counts_half_open_periods_and_a_stale_view_of_arrivals() -> None:
    # 170 s open at 15 s per period: 12 periods begun, one more under way; 2 probes each;
    # two seconds of 10 payments/s let through by views not yet refreshed.
    assert (
        probes_allowed(
            open_seconds=15.0, probes=2, circuit_open_for_seconds=170.0, arrivals_per_second=10.0
        )
        == 2 * 13 + 20
    )
    assert (
        probes_allowed(
            open_seconds=15.0, probes=2, circuit_open_for_seconds=0.0, arrivals_per_second=10.0
        )
        == 0
    )


def test_the_report_carries_one_verdict_per_variant_and_criterion() -> None:
    missed = copy.deepcopy(healthy_run())
    missed["parked"].update(max_seen=111, at_end=111)

    met = report.verdicts({"outage": {"5xx": healthy_run(), "timeout": missed}})

    assert met["outage.5xx.parked"] is True
    assert met["outage.timeout.parked"] is False
    assert met["outage.timeout.succeeded"] is True


def test_variants_default_to_both_and_an_unknown_one_is_refused() -> None:
    assert parse_variants(None) == ("5xx", "timeout")
    assert parse_variants(["timeout", "timeout"]) == ("timeout",)
    with pytest.raises(ValueError, match="known: 5xx, timeout"):
        parse_variants(["503"])


def test_the_outage_runs_only_when_named_with_its_options() -> None:
    common: dict[str, Any] = dict(
        embedded=False, quick=False, payments=1000, worker_concurrency=4, output=None
    )
    assert "outage" not in options_from_cli(only=None, **common).scenarios
    assert "outage" not in SCENARIOS

    options = options_from_cli(
        only=["outage"],
        outage_variants=["5xx"],
        outage_rate=5.0,
        outage_seconds=20.0,
        **common,
    )

    assert options.scenarios == ("outage",)
    assert options.outage_variants == ("5xx",)
    assert (options.outage_rate, options.outage_seconds) == (5.0, 20.0)
    defaults = options_from_cli(only=["outage"], **common)
    assert (defaults.outage_rate, defaults.outage_seconds) == (10.0, 180.0)
    assert defaults.outage_variants == ("5xx", "timeout")
    with pytest.raises(ValueError, match="variant"):
        options_from_cli(only=["outage"], outage_variants=["503"], **common)
