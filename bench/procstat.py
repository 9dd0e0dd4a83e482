"""Memory, CPU and context switches of a measured process and its children (its process
group), from /proc.

Every process the bench starts leads its own process group (``tests.support.processes``), so
a prefork worker's pool children are found by their group id.  ``Sampler`` reads the group
every ``interval`` seconds in a thread of the bench process (reading /proc costs the
measured processes nothing) and keeps the peak resident set, the CPU time used and, every
``switches_every`` samples, the context switches of every thread in the group (a threads
worker's payments hand the interpreter lock among 64 threads per process, and on this VM
those switches are what separates 5 ms of CPU per payment from 7: docs/performance.md).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class GroupUsage:
    processes: int
    rss_bytes: int
    cpu_seconds: float  # user + system of the live members (exited children are lost)
    system_seconds: float = 0.0  # the kernel's part of cpu_seconds
    # Proportional set size: each shared page divided among the processes that map it.  A
    # group of forked processes (prefork, the threads processes under their supervisor)
    # shares its imported code copy-on-write, which summed RSS counts once per process.
    pss_bytes: int = 0
    members: tuple[int, ...] = ()  # the group's process ids


def group_usage(leader: int) -> GroupUsage:
    count, rss, ticks, system, pss = 0, 0, 0, 0, 0
    members: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        # The command (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = text.rsplit(")", 1)[-1].split()
        # fields[0] is field 3 (state): pgrp is field 5, utime 14, stime 15, rss 24.
        if len(fields) < 22 or fields[2] != str(leader):
            continue
        count += 1
        members.append(int(stat.parent.name))
        ticks += int(fields[11]) + int(fields[12])
        system += int(fields[12])
        rss += int(fields[21]) * _PAGE
        pss += _pss_bytes(stat.parent)
    return GroupUsage(
        processes=count,
        rss_bytes=rss,
        cpu_seconds=ticks / _TICKS,
        system_seconds=system / _TICKS,
        pss_bytes=pss,
        members=tuple(members),
    )


def context_switches(pids: tuple[int, ...]) -> int:
    """Voluntary and involuntary context switches of every live thread of ``pids`` (a
    thread that ended meanwhile takes its count with it: read it on long-lived threads)."""
    total = 0
    for pid in pids:
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            try:
                with status.open() as lines:
                    for line in lines:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt")):
                            total += int(line.split()[1])
            except (OSError, ValueError):  # the thread ended while it was read
                continue
    return total


def command_cpu_seconds(prefixes: tuple[str, ...]) -> float:
    """CPU seconds of every live process whose command starts with one of ``prefixes``
    (``postgres``, ``beam.smp``): the shared servers the bench does not start, on this
    machine; another client's work on them is counted too, so read it on a quiet machine."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        command = text[text.find("(") + 1 : text.rfind(")")]
        if command.startswith(prefixes):
            fields = text.rsplit(")", 1)[-1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS


def machine_busy_seconds() -> float:
    """CPU seconds every core spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        values = [int(value) for value in stat.readline().split()[1:]]
    idle, iowait = values[3], values[4]
    return (sum(values[:8]) - idle - iowait) / _TICKS


def _pss_bytes(process: Path) -> int:
    try:
        text = (process / "smaps_rollup").read_text()
    except OSError:  # exited meanwhile, or no smaps_rollup (kernels before 4.14)
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class Sampler:
    """Samples ``leader``'s group, and ``in_flight()`` (payments being worked on), until
    stopped."""

    leader: int
    in_flight: Callable[[], int] | None = None
    interval: float = 0.25
    peak_rss_bytes: int = 0
    peak_pss_bytes: int = 0
    first: GroupUsage | None = None
    last: GroupUsage | None = None
    in_flight_samples: list[int] = field(default_factory=list)
    # (wall-clock instant, CPU seconds so far) per sample: the CPU spent between two
    # instants, e.g. over the steady window of the completion rate.
    cpu_series: list[tuple[float, float]] = field(default_factory=list)
    # (wall-clock instant, context switches so far), every ``switches_every`` samples and
    # at the stop: reading every thread's status costs the bench ~4 ms for 130 threads, on
    # the cores the measured processes use.  0: not read.
    switch_series: list[tuple[float, float]] = field(default_factory=list)
    switches_every: int = 0
    _samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="procstat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self, *, with_switches: bool = False) -> None:
        usage = group_usage(self.leader)
        if usage.processes == 0:
            return
        if self.first is None:
            self.first = usage
        self.last = usage
        now = time.time()
        self.cpu_series.append((now, usage.cpu_seconds))
        if self.switches_every and (with_switches or self._samples % self.switches_every == 0):
            self.switch_series.append((now, float(context_switches(usage.members))))
        self._samples += 1
        self.peak_rss_bytes = max(self.peak_rss_bytes, usage.rss_bytes)
        self.peak_pss_bytes = max(self.peak_pss_bytes, usage.pss_bytes)
        if self.in_flight is not None:
            self.in_flight_samples.append(self.in_flight())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample(with_switches=True)

    def cpu_seconds_between(self, start: float, end: float) -> float | None:
        """CPU seconds spent between two wall-clock instants, interpolated between samples;
        None when the samples do not cover them."""
        return _between(self.cpu_series, start, end)

    def context_switches_between(self, start: float, end: float) -> float | None:
        """Context switches of the group's threads between two instants (as
        ``cpu_seconds_between``, on the sparser series)."""
        return _between(self.switch_series, start, end)

    @property
    def cpu_seconds(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last.cpu_seconds - self.first.cpu_seconds

    @property
    def system_seconds(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last.system_seconds - self.first.system_seconds

    @property
    def peak_in_flight(self) -> int:
        return max(self.in_flight_samples, default=0)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def _between(series: list[tuple[float, float]], start: float, end: float) -> float | None:
    if len(series) < 2 or not (series[0][0] <= start <= end <= series[-1][0]):
        return None
    return _value_at(series, end) - _value_at(series, start)


def _value_at(series: list[tuple[float, float]], instant: float) -> float:
    """The running total (CPU seconds, context switches) at ``instant``, on the straight
    line between the samples around it."""
    times = [at for at, _ in series]
    index = min(max(bisect.bisect_left(times, instant), 1), len(series) - 1)
    (t0, c0), (t1, c1) = series[index - 1], series[index]
    return c0 if t1 == t0 else c0 + (c1 - c0) * (instant - t0) / (t1 - t0)
