"""Requests a simulator holds back (a fault's stall or hang) until a time or its stop.

A held request waits on an event, never a poll.  A hanging request outlives its client (the
client's read timeout closes the socket, not the handler), so an outage's worth of them
stays held long after: each polling 20 times a second, a hundred of them took a
noticeable share of a core from everything else on the machine, the system under test
included, until the hang's end.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress

import anyio


class Stalls:
    """The held requests of one simulator; ``release`` lets every one answer now, from
    any thread, and every later one too."""

    def __init__(self) -> None:
        self._released = threading.Event()
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    async def hold(self, seconds: float) -> None:
        """Return after ``seconds``, or at once when released."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiting.add(waiter)
        try:
            if self._released.is_set():
                return  # checked after registering: a release in between sets ours too
            with anyio.move_on_after(seconds):
                await waiter[1].wait()
        finally:
            with self._lock:
                self._waiting.discard(waiter)

    def release(self) -> None:
        self._released.set()
        with self._lock:
            waiting = list(self._waiting)
        for loop, event in waiting:
            with suppress(RuntimeError):  # its loop already closed: nothing waits on it
                loop.call_soon_threadsafe(event.set)
