"""Scenario 3, the retry storm: 200 concurrent identical POSTs (one key, one body), beside 200
concurrent distinct ones, both as a burst on 200 pre-opened connections.

The identical ones meet on one row: the first INSERT … ON CONFLICT DO NOTHING claims it and
the others find it and answer the replay.  The contract says concurrent duplicates must not
wait on each other for long; the figure is their p99 beside the distinct burst's p99.  Each
burst is repeated (a fresh key per identical burst) and the latencies pooled; the first of
each kind warms up and is not counted.  Every identical burst must name one payment only.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

from bench.accept import payment_request
from bench.load import RequestFactory, Samples, burst
from bench.stats import ratio


def _same(api_key: str, key: str) -> RequestFactory:
    return lambda _number, _sequence: payment_request(api_key, key)


def _each(api_key: str, prefix: str) -> RequestFactory:
    return lambda number, _sequence: payment_request(api_key, f"{prefix}-{number}")


def measure_storm(api_url: str, api_key: str, *, size: int, rounds: int) -> dict[str, Any]:
    return asyncio.run(_measure(api_url, api_key, size, rounds))


async def _measure(api_url: str, api_key: str, size: int, rounds: int) -> dict[str, Any]:
    run = secrets.token_hex(4)
    identical, distinct = Samples(), Samples()
    named: set[str] = set()
    for round_ in range(-1, rounds):  # round -1 warms up
        same_key = f"storm-{run}-{round_}"
        storm, bodies = await burst(api_url, _same(api_key, same_key), size=size)
        ids = {json.loads(body)["id"] for body in bodies if body}
        if len(ids) != 1:
            raise RuntimeError(f"one key answered with {len(ids)} payments: {sorted(ids)}")
        spread, _ = await burst(api_url, _each(api_key, f"distinct-{run}-{round_}"), size=size)
        if round_ >= 0:
            identical.merge(storm)
            distinct.merge(spread)
            named |= ids
    storm_summary, distinct_summary = identical.summary(), distinct.summary()
    return {
        "size": size,
        "rounds": rounds,
        "identical": storm_summary,
        "distinct": distinct_summary,
        "p99_ratio": ratio(storm_summary["p99_ms"], distinct_summary["p99_ms"]),
        "payments_from_identical_bursts": len(named),
    }
