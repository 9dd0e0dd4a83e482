"""One machine-wide lock around every start, stop and install of a shared service.

Hazard: several test sessions may run on one machine at once (developers, CI, a fresh clone).
Without the lock, two sessions that both find PostgreSQL stopped both run ``pg_ctlcluster
start``, or one session's outage test stops RabbitMQ while another is installing it.  The lock
is reentrant inside one process, so an outage helper that holds it can call ``ensure_*``.
It does not stop another session's tests from seeing an outage: that is inherent to sharing
one server, and the outage helpers keep their window short.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOCK_PATH = Path(tempfile.gettempdir()) / "payorch-test-services.lock"

# Longer than the slowest holder (an apt install of both services), shorter than forever.
LOCK_TIMEOUT_SECONDS = 1800.0


class ServiceLock:
    def __init__(self, path: Path = LOCK_PATH) -> None:
        self._path = path
        self._guard = threading.RLock()
        self._depth = 0
        self._file: IO[bytes] | None = None

    @property
    def path(self) -> Path:
        return self._path

    @contextmanager
    def held(self, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
        with self._guard:
            if self._depth == 0:
                self._file = self._acquire(timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._file is not None:
                    fcntl.flock(self._file, fcntl.LOCK_UN)
                    self._file.close()
                    self._file = None

    def _acquire(self, timeout: float) -> IO[bytes]:
        handle = self._path.open("ab")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    handle.close()
                    raise TimeoutError(
                        f"another test session held {self._path} for {timeout:.0f}s"
                    ) from None
                time.sleep(0.2)
            else:
                handle.truncate(0)
                handle.write(f"{os.getpid()}\n".encode())
                handle.flush()
                return handle


SERVICE_LOCK = ServiceLock()
