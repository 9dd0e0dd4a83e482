"""The benchmark's steady-state CPU per payment: the CPU between two instants, read off the
sampler's series, over the completion rate's own window."""

from __future__ import annotations

from bench.procstat import Sampler
from bench.stats import completion_rate, steady_window


def _sampler(series: list[tuple[float, float]]) -> Sampler:
    sampler = Sampler(leader=0)
    sampler.cpu_series.extend(series)
    return sampler


def test_the_cpu_between_two_instants_is_interpolated_between_samples() -> None:
    # 1 s of CPU per second of wall clock from 10.0 to 12.0, then 0.5 s per second.
    sampler = _sampler([(10.0, 0.0), (11.0, 1.0), (12.0, 2.0), (14.0, 3.0)])

    assert sampler.cpu_seconds_between(10.5, 11.5) == 1.0
    assert sampler.cpu_seconds_between(11.0, 14.0) == 2.0
    assert sampler.cpu_seconds_between(12.0, 13.0) == 0.5


def test_instants_outside_the_samples_have_no_answer() -> None:
    sampler = _sampler([(10.0, 0.0), (11.0, 1.0)])

    assert sampler.cpu_seconds_between(9.0, 10.5) is None
    assert sampler.cpu_seconds_between(10.5, 11.5) is None
    assert _sampler([(10.0, 0.0)]).cpu_seconds_between(10.0, 10.0) is None


def test_the_steady_window_is_the_one_the_completion_rate_measures() -> None:
    times = [float(t) for t in range(100)]

    window = steady_window(times)

    assert window == (10.0, 89.0, 79)
    rate = completion_rate(times)
    assert rate["window_seconds"] == window[1] - window[0]
    assert rate["per_second"] == round(window[2] / (window[1] - window[0]), 1)
    assert steady_window(times[:9]) is None
