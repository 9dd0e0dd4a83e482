"""Scenario 1, the accept path: ``POST /v1/payments`` at 50 concurrent clients, beside the
bare route of the same app and server (``bench.server``), every request a new key.

No worker runs meanwhile: this is the API's own cost (the messages wait in the queue and
are dropped with the vhost).  Rounds alternate ours / bare so that a machine getting busier
or quieter during the run affects both alike; each side's figures pool its rounds.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from bench.load import Request, Samples, closed_loop, json_post
from bench.server import BARE_PATH

PAYMENTS_PATH = "/v1/payments"
BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}
WARMUP_SECONDS = 2.0


def payment_request(api_key: str, key: str, path: str = PAYMENTS_PATH) -> Request:
    return json_post(path, BODY, {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key})


def measure_accept(
    api_url: str, api_key: str, *, concurrency: int, seconds: float, rounds: int
) -> dict[str, Any]:
    return asyncio.run(_measure(api_url, api_key, concurrency, seconds, rounds))


async def _measure(
    api_url: str, api_key: str, concurrency: int, seconds: float, rounds: int
) -> dict[str, Any]:
    run = secrets.token_hex(4)

    def ours(round_: int) -> Any:
        return lambda conn, seq: payment_request(api_key, f"bench-{run}-{round_}-{conn}-{seq}")

    def bare(round_: int) -> Any:
        return lambda conn, seq: payment_request(api_key, f"bare-{round_}-{conn}-{seq}", BARE_PATH)

    # Warm both paths (connection pools, code paths, PostgreSQL's caches); not counted.
    await closed_loop(api_url, ours(-1), concurrency=concurrency, seconds=WARMUP_SECONDS)
    await closed_loop(api_url, bare(-1), concurrency=concurrency, seconds=WARMUP_SECONDS)
    ours_samples, bare_samples = Samples(), Samples()
    for round_ in range(rounds):
        ours_samples.merge(
            await closed_loop(api_url, ours(round_), concurrency=concurrency, seconds=seconds)
        )
        bare_samples.merge(
            await closed_loop(api_url, bare(round_), concurrency=concurrency, seconds=seconds)
        )
    ours_summary, bare_summary = ours_samples.summary(), bare_samples.summary()
    return {
        "concurrency": concurrency,
        "ours": ours_summary,
        "bare": bare_summary,
        "ratio": round(ours_summary["rps"] / bare_summary["rps"], 3)
        if bare_summary["rps"]
        else None,
    }
