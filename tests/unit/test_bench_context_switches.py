"""The benchmark's context switches per payment: every thread of the measured process group
counted from /proc, read between two instants like the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from bench.procstat import Sampler, context_switches, group_usage

# A process that leads its own group and whose two threads switch all the time: each sleep
# is a voluntary context switch.
_SWITCHING = """
import threading, time
def nap():
    while True:
        time.sleep(0.001)
threading.Thread(target=nap, daemon=True).start()
print("ready", flush=True)
nap()
"""

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


@pytest.fixture
def switching_group() -> Iterator[int]:
    process = subprocess.Popen(
        [sys.executable, "-c", _SWITCHING],
        stdout=subprocess.PIPE,
        start_new_session=True,  # its own process group, as the bench starts its processes
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"ready"
        yield process.pid
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


def test_every_thread_of_the_group_is_counted_and_the_count_grows(switching_group: int) -> None:
    members = group_usage(switching_group).members
    assert members == (switching_group,)
    first = context_switches(members)
    time.sleep(0.3)
    second = context_switches(members)

    assert first > 0
    # Two threads sleeping 1 ms at a time switch hundreds of times in 0.3 s.
    assert second - first > 50
    # The main thread's count alone (/proc/PID/status) is only part of it.
    main_only = _status_switches(f"/proc/{switching_group}/status")
    assert second > main_only


def test_a_process_that_is_gone_counts_nothing() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()

    assert context_switches((process.pid,)) == 0


def test_the_sampler_reads_switches_every_nth_sample_and_at_the_stop(
    switching_group: int,
) -> None:
    sampler = Sampler(switching_group, interval=3600, switches_every=3)
    for _ in range(4):
        sampler.sample()
    sampler.stop()  # never started: only the final sample, which always reads them

    assert len(sampler.cpu_series) == 5
    assert len(sampler.switch_series) == 3  # samples 0 and 3, and the stop
    start, end = sampler.switch_series[0][0], sampler.switch_series[-1][0]
    between = sampler.context_switches_between(start, end)
    assert between == sampler.switch_series[-1][1] - sampler.switch_series[0][1]
    assert between is not None and between > 0


def test_a_sampler_not_asked_for_switches_reads_none(switching_group: int) -> None:
    sampler = Sampler(switching_group)
    sampler.sample()
    sampler.stop()

    assert sampler.switch_series == []
    assert sampler.context_switches_between(0.0, time.time()) is None


def test_switches_between_two_instants_are_interpolated() -> None:
    sampler = Sampler(leader=0)
    sampler.switch_series.extend([(10.0, 0.0), (11.0, 100.0), (13.0, 200.0)])

    assert sampler.context_switches_between(10.5, 12.0) == 100.0
    assert sampler.context_switches_between(9.0, 12.0) is None


def _status_switches(path: str) -> int:
    total = 0
    with open(path) as lines:
        for line in lines:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt")):
                total += int(line.split()[1])
    return total
