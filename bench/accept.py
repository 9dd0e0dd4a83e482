"""Scenario 1, the accept path: ``POST /v1/payments`` at 50 concurrent clients, beside the
bare route of the same app and server (``bench.server``), every request a new key.

On PostgreSQL a third side, the same accept served by its thread path only
(``bench.server``'s ``THREADS_ACCEPT_PATH``: no statement on the event loop), is measured in
the same rounds.  No worker runs
meanwhile: this is the API's own cost (the messages wait in the queue and
are dropped with the vhost).  Under PAYORCH_WAKE_UP=notify (PostgreSQL's default) the
publishes happen in ``payorch dispatcher``, which runs on the same cores meanwhile, so its
CPU is paid in the same run.  Rounds alternate ours / bare so that a machine getting busier
or quieter during the run affects both alike; each side's figures pool its rounds.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Callable
from typing import Any

from bench.load import Request, Samples, closed_loop, json_post
from bench.procstat import command_cpu_seconds, group_usage, machine_busy_seconds
from bench.profile import record
from bench.server import BARE_PATH, THREADS_ACCEPT_PATH

PAYMENTS_PATH = "/v1/payments"
BODY = {"amount": 1999, "currency": "usd", "payment_method": "pm_card_visa"}
WARMUP_SECONDS = 2.0


def payment_request(api_key: str, key: str, path: str = PAYMENTS_PATH) -> Request:
    return json_post(path, BODY, {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key})


def measure_accept(
    api_url: str,
    api_key: str,
    *,
    concurrency: int,
    seconds: float,
    rounds: int,
    cpu_of: dict[str, int] | None = None,
    compare_threads: bool = False,
) -> dict[str, Any]:
    """``cpu_of``: process group leaders (name -> pid) whose CPU time is charged to each
    side's requests (the API; the dispatcher), read from /proc around each round; with an
    ``api`` among them, also PostgreSQL's, RabbitMQ's and the whole machine's.
    ``compare_threads``: a third side, the thread path alone (PostgreSQL only)."""
    return asyncio.run(
        _measure(api_url, api_key, concurrency, seconds, rounds, cpu_of or {}, compare_threads)
    )


# The servers every accept also costs, found by command: PostgreSQL's backends and
# RabbitMQ's Erlang VM (the bench's own processes are counted by process group).
SHARED_SERVERS = {"postgresql": ("postgres",), "rabbitmq": ("beam.smp",)}


class _Cpu:
    """CPU seconds used while one side's rounds ran: by some process groups (the API, the
    dispatcher), by the shared servers (PostgreSQL, RabbitMQ), by the whole machine."""

    def __init__(self, leaders: dict[str, int], *, shared: bool) -> None:
        self._readers: dict[str, Callable[[], float]] = {
            name: functools.partial(_group_cpu, pid) for name, pid in leaders.items()
        }
        if shared:
            for name, prefixes in SHARED_SERVERS.items():
                self._readers[name] = functools.partial(command_cpu_seconds, prefixes)
            self._readers["machine"] = machine_busy_seconds
        self.seconds = {name: 0.0 for name in self._readers}

    def __enter__(self) -> _Cpu:
        self._start = {name: read() for name, read in self._readers.items()}
        return self

    def __exit__(self, *_exc: object) -> None:
        for name, read in self._readers.items():
            self.seconds[name] += read() - self._start[name]

    def per_request_ms(self, requests: int) -> dict[str, float]:
        return {n: round(1000 * s / requests, 3) for n, s in self.seconds.items() if requests}


def _group_cpu(leader: int) -> float:
    return group_usage(leader).cpu_seconds


async def _measure(
    api_url: str,
    api_key: str,
    concurrency: int,
    seconds: float,
    rounds: int,
    cpu_of: dict[str, int],
    compare_threads: bool,
) -> dict[str, Any]:
    run = secrets.token_hex(4)

    def ours(round_: int) -> Any:
        return lambda conn, seq: payment_request(api_key, f"bench-{run}-{round_}-{conn}-{seq}")

    def bare(round_: int) -> Any:
        return lambda conn, seq: payment_request(api_key, f"bare-{round_}-{conn}-{seq}", BARE_PATH)

    def threads(round_: int) -> Any:
        return lambda conn, seq: payment_request(
            api_key, f"threads-{run}-{round_}-{conn}-{seq}", THREADS_ACCEPT_PATH
        )

    # Warm both paths (connection pools, code paths, PostgreSQL's caches); not counted.
    await closed_loop(api_url, ours(-1), concurrency=concurrency, seconds=WARMUP_SECONDS)
    await closed_loop(api_url, bare(-1), concurrency=concurrency, seconds=WARMUP_SECONDS)
    sides: dict[str, Any] = {"ours": ours, "bare": bare}
    if compare_threads:
        sides["threads"] = threads
        await closed_loop(api_url, threads(-1), concurrency=concurrency, seconds=WARMUP_SECONDS)
    samples = {side: Samples() for side in sides}
    # The shared servers and the machine only where the API has a process of its own.
    cpu = {side: _Cpu(cpu_of, shared="api" in cpu_of) for side in sides}
    for round_ in range(rounds):
        for side, make in sides.items():
            # BENCH_PROFILE_DIR: py-spy on the API during this side's rounds only.
            api = cpu_of.get("api")
            profile = None if api is None else record(api, f"api-{side}-round{round_}")
            with cpu[side]:
                samples[side].merge(
                    await closed_loop(
                        api_url, make(round_), concurrency=concurrency, seconds=seconds
                    )
                )
            if profile is not None:
                profile.stop()
    summaries = {side: samples[side].summary() for side in sides}
    # CPU per request of each measured process, per side (the dispatcher's CPU during a
    # side that accepts nothing is the tail of the previous side's wake-ups).
    for side, summary in summaries.items():
        summary["cpu_ms_per_request"] = cpu[side].per_request_ms(summary["requests"])
    ours_summary, bare_summary = summaries["ours"], summaries["bare"]
    figures: dict[str, Any] = {}
    if "threads" in summaries and bare_summary["rps"]:
        # The same accept by its thread path alone, in the same rounds.
        figures["threads"] = summaries["threads"]
        figures["threads_ratio"] = round(summaries["threads"]["rps"] / bare_summary["rps"], 3)
    return {
        "concurrency": concurrency,
        "ours": ours_summary,
        "bare": bare_summary,
        **figures,
        "ratio": round(ours_summary["rps"] / bare_summary["rps"], 3)
        if bare_summary["rps"]
        else None,
        # Tail latency under the same 50 clients, ours over bare (target: at most 2).
        "p99_ratio": round(ours_summary["p99_ms"] / bare_summary["p99_ms"], 3)
        if bare_summary["p99_ms"]
        else None,
    }
