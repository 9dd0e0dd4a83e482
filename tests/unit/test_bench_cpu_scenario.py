"""The benchmark's zero-latency CPU scenario (issue 14, goal 2): its verdict, its row in the
table and its options."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from bench import calibrate, report
from bench.run import SCENARIOS, options_from_cli


def _cpu_run(*, steady: float | None, whole: float) -> dict[str, Any]:
    return {
        "worker": "payorch worker (defaults)",
        "worker_cpu_ms_per_payment": whole,
        "worker_cpu_ms_per_payment_steady": steady,
        "sleep_worker_cpu_ms_per_task": 0.41,
        "payments": {"per_second": 287.5},
        "database_per_payment": {"transactions": 3.0, "round_trips": 11.0},
    }


def _results(cpu: dict[str, Any]) -> dict[str, Any]:
    return {
        "cpu": {"postgres": cpu},
        "machine": {
            "cpu_model": "test CPU",
            "cpus_usable": 2,
            "memory_gib": 1.0,
            "python": "3.11",
            "load_average_at_start": [0.0, 0.0, 0.0],
        },
    }


@pytest.mark.parametrize(
    ("steady", "whole", "met"),
    [
        (4.2, 5.6, True),  # judged on the steady window, not on the threads' first tasks
        (5.0, 5.0, True),
        (5.01, 4.9, False),
        (None, 4.9, True),  # a run too short for a window: the whole run decides
        (None, 5.2, False),
    ],
)
def test_goal_2_is_judged_on_the_steady_cpu_per_payment(
    steady: float | None, whole: float, met: bool
) -> None:
    verdicts = report.verdicts(_results(_cpu_run(steady=steady, whole=whole)))

    assert verdicts["cpu.postgres"] is met


def test_a_bench_without_the_cpu_run_has_no_verdict_for_it() -> None:
    assert "cpu.postgres" not in report.verdicts({})


def test_the_table_shows_both_figures_the_pool_floor_and_the_verdict() -> None:
    results = _results(_cpu_run(steady=4.37, whole=4.61))
    results["targets"] = report.verdicts(results)
    console = Console(record=True, width=200)

    report.render(results, console)

    text = console.export_text()
    assert "7. worker CPU per payment" in text
    assert "4.37 ms steady" in text
    assert "4.61 ms whole run" in text
    assert "0.41 ms/task" in text
    assert "<= 5.0 ms" in text
    row = next(line for line in text.splitlines() if "7. worker CPU" in line)
    assert "met" in row and "missed" not in row


def test_the_machine_speed_around_the_run_is_shown_when_measured() -> None:
    run = _cpu_run(steady=4.37, whole=4.61)
    run["reference_work_ms"] = [14.2, 19.75]
    results = _results(run)
    console = Console(record=True, width=200)

    report.render(results, console)

    assert "14.2 / 19.8 ms" in console.export_text()
    assert "reference work" not in _rendered(_results(_cpu_run(steady=4.37, whole=4.61)))


def test_the_reference_work_is_a_positive_cpu_time_of_fixed_work() -> None:
    assert calibrate._work() == calibrate._work()
    assert calibrate.reference_ms() > 0


def _rendered(results: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    report.render(results, console)
    return console.export_text()


def test_cpu_is_a_scenario_of_its_own_with_fewer_payments_in_a_quick_run() -> None:
    assert "cpu" in SCENARIOS
    options = options_from_cli(
        only=["cpu"],
        embedded=False,
        quick=False,
        payments=1000,
        worker_concurrency=4,
        output=None,
        cpu_payments=2000,
    )
    assert options.scenarios == ("cpu",)
    assert options.cpu_payments == 2000
    assert options.quick().cpu_payments == 500
