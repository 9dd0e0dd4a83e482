"""The no-op task: the baseline of the end-to-end figure.

``bench.noop`` takes the same arguments as ``payorch.process_payment`` and does nothing but
report that it ran: one UDP datagram (its own wall-clock time) to the bench process, which
counts them.  A datagram on the loopback costs microseconds, so the task measures what the
Celery setup itself costs per message (delivery, pool dispatch, late ack).

``install()`` registers the tasks as Celery *shared* tasks, which Celery adds to every app of
the process, built before or after (as ``workers.tasks`` registers the production tasks).
Only the bench's own worker and embedded processes call it; the production code is
unchanged, and the app the worker builds is otherwise the production one.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

from celery import shared_task

from orchestrator.providers.calls_in_progress import PROVIDER_CALLS_IN_PROGRESS

NOOP_TASK = "bench.noop"
# The baseline of the latency scenario: a task that only waits, as long as a payment's two
# provider calls take at the scenario's latency, then reports like the no-op.
SLEEP_TASK = "bench.sleep"
ADDRESS_ENV = "BENCH_NOOP_UDP"  # host:port of the counter
_DATAGRAM = struct.Struct("!d")


_socket: socket.socket | None = None


def _report() -> None:
    """One datagram with this instant to the bench's counter (address read when sent, so a
    worker started with ``ADDRESS_ENV`` reports there)."""
    global _socket
    if _socket is None:
        _socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host, _, port = os.environ.get(ADDRESS_ENV, "127.0.0.1:9").rpartition(":")
    _socket.sendto(_DATAGRAM.pack(time.time()), (host, int(port)))


def noop(payment_id: str, lease_token: int) -> None:
    _report()


def sleep(seconds: float) -> None:
    # The wait stands for the payment's provider calls, so it is counted as one: the
    # worker's prefetch limit (workers.prefetch_limit) lets a process hold a message for
    # each call in progress, and an uncounted wait would cap the baseline at the limit's
    # floor (16 tasks in flight: ~27 tasks/s at 600 ms) instead of the pool's concurrency.
    token = PROVIDER_CALLS_IN_PROGRESS.started()
    try:
        time.sleep(seconds)
    finally:
        PROVIDER_CALLS_IN_PROGRESS.ended(token)
    _report()


def install() -> None:
    if getattr(install, "_done", False):
        return
    install._done = True  # type: ignore[attr-defined]
    shared_task(name=NOOP_TASK)(noop)
    shared_task(name=SLEEP_TASK)(sleep)


class Counter:
    """Receives the no-ops' datagrams; ``times`` holds their completion times."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Room for bursts: a full receive buffer drops datagrams and the count never ends.
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        self._sock.bind((host, 0))
        self._sock.settimeout(0.2)
        self.address = "{}:{}".format(*self._sock.getsockname()[:2])
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noop-counter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            (at,) = _DATAGRAM.unpack(data[: _DATAGRAM.size])
            self.times.append(at)

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.times) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def reset(self) -> None:
        self.times = []

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
