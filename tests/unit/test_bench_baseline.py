"""The side-by-side comparison with goal 2's baseline revision: what a pair and the summary
make of the two bench results."""

from __future__ import annotations

import pytest

from bench.baseline import Pair, cpu_per_payment, summary


def test_the_cpu_figure_is_read_from_either_revisions_json() -> None:
    baseline = {"latency": {"w0": {"worker_cpu_ms_per_payment": 28.12}}}
    current = {
        "latency": {
            "w0": {"worker_cpu_ms_per_payment": 6.49, "worker_cpu_ms_per_payment_steady": 5.93}
        }
    }

    assert cpu_per_payment(baseline) == 28.12
    # The whole run on both sides (the baseline's bench has no steady window).
    assert cpu_per_payment(current) == 6.49


def test_the_summary_scales_the_recorded_baseline_by_the_ratios() -> None:
    pairs = [
        Pair(baseline_ms=30.0, current_ms=6.0, baseline_first=True, reference_ms=19.0),
        Pair(baseline_ms=24.0, current_ms=6.0, baseline_first=False, reference_ms=19.0),
    ]

    assert [pair.ratio for pair in pairs] == [5.0, 4.0]
    result = summary(pairs, recorded_ms=18.0)
    assert result["ratio_mean"] == 4.5
    assert result["ratio_lowest"] == 4.0
    assert result["equivalent_ms"] == 4.0
    assert result["equivalent_ms_at_lowest_ratio"] == 4.5


def test_a_missing_figure_is_an_error_not_a_zero() -> None:
    with pytest.raises(KeyError):
        cpu_per_payment({"latency": {}})
