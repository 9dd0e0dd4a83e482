"""The meter of slow provider calls in progress: a call counts for its time beyond the
grace, a running call counts at each read for the time it has run, a read starts the next
window, and the provider wrapper counts every call, failed ones too."""

from __future__ import annotations

import pytest

from orchestrator.providers.base import Declined
from orchestrator.providers.calls_in_progress import PROVIDER_CALLS_IN_PROGRESS, CallsInProgress
from orchestrator.providers.observed import ObservedProvider


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_calls_within_the_grace_do_not_count() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.02)
    for _ in range(50):
        token = meter.started()
        clock.now += 0.015
        meter.ended(token)
    clock.now += 0.25
    assert meter.average_since_last_read() == 0.0


def test_a_slow_call_counts_for_its_time_beyond_the_grace() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.02)
    token = meter.started()
    clock.now += 0.32
    meter.ended(token)
    clock.now += 0.68  # one second in all
    assert meter.average_since_last_read() == pytest.approx(0.30)


def test_calls_running_at_a_read_count_then_and_again_at_the_next() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.0)
    tokens = [meter.started() for _ in range(4)]  # four calls to a provider that stalls
    clock.now += 1.0
    assert meter.average_since_last_read() == pytest.approx(4.0)
    clock.now += 0.5
    for token in tokens:
        meter.ended(token)
    clock.now += 0.5
    # The second window counts only its own half second of the four calls.
    assert meter.average_since_last_read() == pytest.approx(2.0)
    clock.now += 1.0
    assert meter.average_since_last_read() == 0.0


def test_a_read_does_not_count_the_grace_twice() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.1)
    token = meter.started()
    clock.now += 0.05  # still within its grace at this read
    assert meter.average_since_last_read() == 0.0
    clock.now += 0.95
    meter.ended(token)
    # Started 1.0 s ago, its grace ended 0.9 s ago, inside this 0.95 s window.
    assert meter.average_since_last_read() == pytest.approx(0.9 / 0.95)


def test_a_forked_child_starts_with_nothing_in_progress() -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.0)
    meter.started()
    meter.after_fork_in_child()
    clock.now += 1.0
    assert meter.average_since_last_read() == 0.0


class _SlowProvider:
    """A provider whose calls the test clock sees take 0.5 s each."""

    name = "slow"

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def retrieve_payment(self, provider_payment_id: str) -> object:
        self._clock.now += 0.5
        raise Declined("Your card was declined.", code="card_declined")


def test_the_provider_wrapper_counts_every_call_failed_ones_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    meter = CallsInProgress(clock, grace=0.0)
    monkeypatch.setattr("orchestrator.providers.observed.PROVIDER_CALLS_IN_PROGRESS", meter)
    provider = ObservedProvider(_SlowProvider(clock))  # type: ignore[arg-type]
    meter.average_since_last_read()
    for _ in range(2):
        with pytest.raises(Declined):
            provider.retrieve_payment("pi_1")
    assert meter.average_since_last_read() == pytest.approx(1.0)  # 1 s of calls in 1 s
    assert PROVIDER_CALLS_IN_PROGRESS is not meter  # the process's own meter is untouched
