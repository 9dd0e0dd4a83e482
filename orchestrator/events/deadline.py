"""A webhook attempt's hard deadline: a watchdog that shuts the connection down when the
attempt's time is up, whatever the peer is doing.

Why not httpx's timeouts: they bound each socket operation (one connect, one read, one
write), not the attempt.  An endpoint that trickles its response headers a byte a second
answers every read within the read timeout and holds the attempt for as long as it likes
(measured: 20 s against a 2 s timeout, then recorded as delivered).  A check between body
chunks cannot help either: the headers are read inside httpcore before any chunk.

How: httpcore reports each new TCP connection through the request's ``trace`` extension;
the deadline keeps a duplicate of that socket's descriptor and, when the timer fires, calls
``shutdown(SHUT_RDWR)`` on it.  Shutdown acts on the connection, not the descriptor, so the
relay thread blocked in ``recv``/``send``/the TLS handshake on the original descriptor
wakes up at once with an error (``close`` from another thread would not wake it on Linux,
and closing a descriptor another thread uses could close a reused number).  The duplicate
is closed when the attempt ends; the attempt's own connection is closed by httpx as usual.

Hazards: a deadline that fires before the connection exists is remembered, and the
connection is shut the moment it is made (the connect itself is bounded by the connect
timeout).  An attempt whose deadline fired is a timeout even if a complete answer arrived
in the same instant: the relay never records "delivered" for an attempt past its deadline.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import types
from collections.abc import Mapping
from typing import Any

# httpcore's trace event for a new TCP connection (its info carries the network stream).
CONNECTED_EVENT = "connection.connect_tcp.complete"


class AttemptDeadline:
    """One attempt's watchdog: ``with AttemptDeadline(s) as d:`` then pass ``d.trace`` as
    the request's ``trace`` extension; ``expired`` says whether it fired."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._watched: socket.socket | None = None
        self._expired = False
        self._finished = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> AttemptDeadline:
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.finish()

    @property
    def expired(self) -> bool:
        with self._lock:
            return self._expired

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace callback: watch the socket of each new connection."""
        if event != CONNECTED_EVENT:
            return
        stream = info.get("return_value")
        raw = None if stream is None else stream.get_extra_info("socket")
        if isinstance(raw, socket.socket):
            self._watch(raw.dup())

    def finish(self) -> bool:
        """Stop the watchdog (idempotent); True if the deadline fired."""
        self._timer.cancel()
        with self._lock:
            self._finished = True
            if self._watched is not None:
                self._watched.close()
                self._watched = None
            return self._expired

    def _watch(self, duplicate: socket.socket) -> None:
        with self._lock:
            if self._finished:
                duplicate.close()
                return
            self._watched = duplicate
            if self._expired:
                self._shut()

    def _expire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._expired = True
            self._shut()

    def _shut(self) -> None:
        # Called with the lock held.
        if self._watched is None:
            return
        # OSError: already closed by the peer or by httpx, nothing left to stop.
        with contextlib.suppress(OSError):
            self._watched.shutdown(socket.SHUT_RDWR)
