"""How fast this machine runs Python right now, to read a CPU figure against.

The 2-core VM the project is measured on runs the same code at very different speeds from
minute to minute (the same revision's worker CPU per payment read 3.5 and 8.6 ms within
one hour, with no steal time reported: the host's contention is invisible from inside).
A CPU figure in milliseconds therefore says as much about the host as about payorch.

``reference_ms()`` times a fixed piece of work in this process's CPU time (not wall time:
the other processes of the bench do not count): JSON encoding and decoding of a payment
intent-like object, dictionary and string work, the interpreter's own loop: the kinds of
work a payment's CPU is made of.  The bench records it beside the CPU figure, to tell a
slow host from a slow change when a figure moves.  It is never a
verdict's input: the targets stay in milliseconds.  It catches the host's long slow spells
but not all of them (a round has read 8.2 ms beside a normal reference; docs/performance.md).
"""

from __future__ import annotations

import json
import statistics
import time

_INTENT = {
    "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
    "object": "payment_intent",
    "amount": 2000,
    "amount_received": 2000,
    "currency": "usd",
    "status": "succeeded",
    "metadata": {"payorch_payment_id": "pay_0192f0c8a1b27c3d", "order": "A-1001"},
    "payment_method_types": ["card"],
    "latest_charge": "ch_3MtwBwLkdIwHu7ix28a3tqPa",
    "next_action": None,
    "created": 1680800504,
    "livemode": False,
    "description": None,
}
_ROUNDS = 2_000
_REPEATS = 15


def _work() -> int:
    total = 0
    for n in range(_ROUNDS):
        text = json.dumps({**_INTENT, "amount": n})
        parsed = json.loads(text)
        key = f"{parsed['id']}:{parsed['amount']}:{parsed['currency'].upper()}"
        total += len(key) + sum(len(str(value)) for value in parsed.values())
    return total


def reference_ms() -> float:
    """The CPU milliseconds of the fixed work (~14 ms on a quiet host), the median of a
    few repeats: the host's slow spells last seconds, so the median of ~0.3 s of repeats
    reads the speed of the moment, where the fastest repeat would read the hardware's."""
    times = []
    for _ in range(_REPEATS):
        started = time.process_time()
        _work()
        times.append(time.process_time() - started)
    return round(statistics.median(times) * 1000, 2)
