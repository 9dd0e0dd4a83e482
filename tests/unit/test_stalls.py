"""The simulators' held requests (``devtools.stalls``): held until their time, or until a
release from another thread, which also lets every later one through at once."""

from __future__ import annotations

import asyncio
import threading
import time

from devtools.stalls import Stalls


def test_a_hold_ends_at_its_time() -> None:
    stalls = Stalls()
    started = time.monotonic()
    asyncio.run(stalls.hold(0.05))
    assert time.monotonic() - started >= 0.05


def test_a_release_from_another_thread_ends_every_hold_at_once() -> None:
    stalls = Stalls()

    async def three_long_holds() -> float:
        started = time.monotonic()
        asyncio.get_running_loop().call_later(
            0.1, lambda: threading.Thread(target=stalls.release).start()
        )
        await asyncio.gather(*(stalls.hold(3600.0) for _ in range(3)))
        return time.monotonic() - started

    assert asyncio.run(asyncio.wait_for(three_long_holds(), timeout=30)) < 30
    assert stalls.released
    # Released for good: a later hold does not wait.
    asyncio.run(asyncio.wait_for(stalls.hold(3600.0), timeout=5))
