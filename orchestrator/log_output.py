"""Where log lines go: one complete line per ``write(2)``, serialised across processes.

The hazard: several processes share one stderr (a prefork pool's children, ``api
--workers N``'s server processes, a container's stdout pipe) and several threads share one
process (the threads pool).  ``print`` -- and so structlog's ``PrintLogger`` -- writes a
record and its newline in two ``write`` calls (CPython's stderr is write-through, and
``PYTHONUNBUFFERED`` makes every stream so), so two processes logging at once produced
``{...}{...}`` followed by two newlines: a log shipper reading JSON lines drops or mangles
both records.

Here every record leaves in ONE ``write`` of the whole line, newline included (looping
only on a short write, which a blocking descriptor makes only on a signal or a full
disk).  One write is atomic up to ``PIPE_BUF`` bytes (4096 on Linux) on a pipe, but a
longer record (a traceback) written into a full pipe is split by the kernel and may be
interleaved with another writer's.  So each write also holds an exclusive POSIX record
lock (``lockf``) on the stream: it is per process and per open file (pipe or regular
file), so every process writing the same stream queues for it, however it got the
descriptor (fork, spawn, a shell redirect).  A POSIX lock does not exclude threads of its
own process, so a thread lock comes first.

A regular file needs no lock: Linux writes one ``write`` to it whole, however long,
under the file's own lock (the inode's for ``O_APPEND``, the shared offset's for a
descriptor inherited over fork), so lines are never split or interleaved there.  The lock
is taken for pipes, sockets and terminals only; whether a descriptor is a regular file is
read once per descriptor.  (Each ``fcntl`` hands the interpreter lock to another thread,
one more such hand-over beside the many a payment already makes in a threads worker.)

Costs and edges: two ``fcntl`` calls per line on a pipe; a process frozen (SIGSTOP) in the
microseconds between lock and unlock holds up other processes' logging until it
continues (a killed one releases the lock); a stream that refuses locks (``ENOLCK``,
``EINVAL``) is written without, still one write per line.
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import stat
import threading
import weakref
from typing import Any, TextIO


class LineWriter:
    """Writes whole lines to one stream; see the module docstring for why this way."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._thread_lock = threading.RLock()
        self._depth = 0  # nested write_line calls in this thread (a signal handler's)
        self._lockable = True
        self._regular: tuple[int, bool] | None = None  # (fd, a regular file?), read once
        _writers.add(self)

    def write_line(self, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode("utf-8", "backslashreplace")
        fd = self._fileno()
        if fd is None:
            # Not an OS-level stream (a test runner's in-memory capture): nothing to share.
            self._stream.write(data.decode("utf-8"))
            self._stream.flush()
            return
        # Reentrant: a signal handler (Celery's shutdown notice) may log while this thread
        # is between lock and write; only the outermost call takes and drops the POSIX lock,
        # and each call still writes its own whole line.
        with self._thread_lock:
            outermost = self._depth == 0
            self._depth += 1
            try:
                locked = outermost and self._lock_stream(fd)
                try:
                    _write_all(fd, data)
                finally:
                    if locked:
                        fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                self._depth -= 1

    def _fileno(self) -> int | None:
        try:
            fd = self._stream.fileno()
        except (AttributeError, ValueError, io.UnsupportedOperation):
            return None
        if not isinstance(fd, int) or fd < 0:
            return None  # Celery's LoggingProxy answers None
        # Text other code left buffered in the stream must come out first.
        self._stream.flush()
        return fd

    def _lock_stream(self, fd: int) -> bool:
        if not self._lockable or self._is_regular_file(fd):
            return False
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
        except OSError:
            self._lockable = False  # e.g. ENOLCK on some network filesystems
            return False
        return True

    def _is_regular_file(self, fd: int) -> bool:
        known = self._regular
        if known is None or known[0] != fd:
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
            except OSError:
                regular = False
            known = self._regular = (fd, regular)
        return known[1]

    def _reset_after_fork(self) -> None:
        # A fork while another thread held the lock would leave the child's copy held
        # forever (and the child's first log line would hang); the child starts afresh.
        # The POSIX lock is not inherited over fork, so there is nothing to undo there.
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._lockable = True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


_writers: weakref.WeakSet[LineWriter] = weakref.WeakSet()


def _reset_writers_in_child() -> None:
    for writer in list(_writers):
        writer._reset_after_fork()


os.register_at_fork(after_in_child=_reset_writers_in_child)

_writer_for_stream: dict[int, LineWriter] = {}


def line_writer(stream: TextIO) -> LineWriter:
    """The one writer of ``stream``: structlog's lines and the standard library's share it
    (and so its thread lock)."""
    writer = _writer_for_stream.get(id(stream))
    if writer is None or writer._stream is not stream:
        writer = _writer_for_stream[id(stream)] = LineWriter(stream)
    return writer


class LineLogger:
    """A structlog logger (the final processor renders the line) that writes through a
    ``LineWriter``, instead of structlog's ``PrintLogger``."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer

    def msg(self, message: str) -> None:
        self._writer.write_line(message)

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = msg


class LineLoggerFactory:
    def __init__(self, stream: TextIO) -> None:
        self._writer = line_writer(stream)

    def __call__(self, *_args: Any) -> LineLogger:
        return LineLogger(self._writer)


class LineHandler(logging.Handler):
    """A ``logging`` handler that writes each formatted record through a ``LineWriter``
    (``StreamHandler`` would write the record and then flush: one write today, but
    unserialised across processes for a record longer than ``PIPE_BUF``)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._writer = line_writer(stream)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.write_line(self.format(record))
        except RecursionError:
            raise
        except Exception:  # logging must not take the process down (handleError reports)
            self.handleError(record)
