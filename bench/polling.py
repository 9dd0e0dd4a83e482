"""Scenario 5, polling: 50 clients each polling a ``processing`` payment
(``GET /v1/payments/{id}``) back to back, without and then with ``If-None-Match``.

No worker runs, so every payment stays ``processing`` and every conditional poll is a
``304``: this is what a merchant's poller costs while a payment is in flight, and what the
ETag saves.  Requests per second and bytes received (status line, headers and body, as they
crossed the socket) are reported for both; rounds alternate plain / conditional so a machine
getting busier affects both alike.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from bench.accept import payment_request
from bench.load import Connection, ProtocolError, Request, Samples

WARMUP_SECONDS = 2.0


def measure_polling(
    api_url: str, api_key: str, *, concurrency: int, seconds: float, rounds: int
) -> dict[str, Any]:
    return asyncio.run(_measure(api_url, api_key, concurrency, seconds, rounds))


async def _create_payments(api_url: str, api_key: str, count: int) -> list[str]:
    connection = Connection(api_url)
    run = secrets.token_hex(4)
    locations = []
    for number in range(count):
        status, _ = await connection.send(payment_request(api_key, f"poll-{run}-{number}"))
        if status != 202:
            raise RuntimeError(f"accept answered {status}")
        locations.append(connection.last_headers["location"])
    await connection.close()
    return locations


def _poll(api_key: str, location: str, etag: str | None) -> Request:
    headers = {"Authorization": f"Bearer {api_key}"}
    if etag is not None:
        headers["If-None-Match"] = etag
    return Request("GET", location, headers)


async def _round(
    api_url: str, api_key: str, locations: list[str], *, conditional: bool, seconds: float
) -> tuple[Samples, int]:
    """Each client polls its own payment; a conditional client sends the ETag it last saw
    (as a real poller does: the first answer is a 200, then 304s while nothing changes)."""
    samples = Samples()
    connections = [Connection(api_url) for _ in locations]
    await asyncio.gather(*(c.open() for c in connections))
    started = time.perf_counter()
    deadline = started + seconds

    async def client(connection: Connection, location: str) -> None:
        etag: str | None = None
        while time.perf_counter() < deadline:
            request = _poll(api_key, location, etag if conditional else None)
            sent = time.perf_counter()
            try:
                status, _ = await connection.send(request)
            except (OSError, asyncio.IncompleteReadError, ProtocolError) as error:
                samples.error(type(error).__name__)
                await connection.close()
                continue
            samples.add(status, time.perf_counter() - sent)
            etag = connection.last_headers.get("etag", etag)

    await asyncio.gather(*(client(c, loc) for c, loc in zip(connections, locations, strict=True)))
    samples.elapsed = time.perf_counter() - started
    received = sum(c.received for c in connections)
    await asyncio.gather(*(c.close() for c in connections))
    return samples, received


def _figures(samples: Samples, received: int) -> dict[str, Any]:
    summary = samples.summary()
    summary["bytes_received"] = received
    summary["bytes_per_request"] = round(received / samples.count, 1) if samples.count else None
    return summary


async def _measure(
    api_url: str, api_key: str, concurrency: int, seconds: float, rounds: int
) -> dict[str, Any]:
    locations = await _create_payments(api_url, api_key, concurrency)
    await _round(api_url, api_key, locations, conditional=False, seconds=WARMUP_SECONDS)
    plain, conditional = Samples(), Samples()
    plain_bytes = conditional_bytes = 0
    for _ in range(rounds):
        samples, received = await _round(
            api_url, api_key, locations, conditional=False, seconds=seconds
        )
        plain.merge(samples)
        plain_bytes += received
        samples, received = await _round(
            api_url, api_key, locations, conditional=True, seconds=seconds
        )
        conditional.merge(samples)
        conditional_bytes += received
    plain_figures = _figures(plain, plain_bytes)
    conditional_figures = _figures(conditional, conditional_bytes)
    return {
        "concurrency": concurrency,
        "plain": plain_figures,
        "if_none_match": conditional_figures,
        "rps_ratio": round(conditional_figures["rps"] / plain_figures["rps"], 3)
        if plain_figures["rps"]
        else None,
        "bytes_ratio": round(
            conditional_figures["bytes_per_request"] / plain_figures["bytes_per_request"], 3
        )
        if plain_figures["bytes_per_request"] and conditional_figures["bytes_per_request"]
        else None,
    }
