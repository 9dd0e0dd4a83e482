"""Scenario 9, provider outage: issue 41's acceptance run with real processes and the
project's default circuit settings (decision 0082).

Per variant (``5xx``: every call answered 500; ``timeout``: no call answered), on a fresh
stack (the API, the default ``payorch worker``, a ``payorch sweeper``, the Stripe simulator):

1. the pool's speed: a backlog accepted with no worker running, then drained by the default
   worker against a healthy provider (the shallow drain of scenario 8);
2. payments arrive at ``rate`` per second, open loop, for ``BEFORE_SECONDS`` with the
   provider healthy, ``outage_seconds`` with the variant's fault armed, ``AFTER_SECONDS``
   after the recovery; every second the bench reads the circuit and the parked payments;
3. after the recovery it waits until every accepted payment is final, then reads the
   simulator's request log (calls during the outage, and after the circuit first opened),
   its money movements (charged twice, or not at all), the drain after recovery, and the
   broker messages (one wake-up per payment, except those the dispatcher held for an open
   circuit, + the sweeper's re-queues and releases, lease events ``takeover``, as in
   scenario 8).

The verdicts are ``bench.outage_verdict``'s.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.accept import payment_request
from bench.load import Connection, fixed_count
from bench.maintenance import autovacuum_stand_in
from bench.outage_verdict import VARIANTS, probes_allowed
from bench.stack import Stack, production_stack
from bench.stats import completion_rate, ratio
from orchestrator.db.tables import circuits, lease_events, payments
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.services.accept import INITIAL_LEASE_TOKEN
from orchestrator.settings import Settings

BEFORE_SECONDS = 10.0
AFTER_SECONDS = 10.0
ACCEPT_CONCURRENCY = 50
# Polls of the database while the run goes on: a reading, not a wait for a timeout.
SAMPLE_SECONDS = 1.0


@dataclass
class Arrivals:
    """What the open-loop load generator saw: the payments the API accepted, by id."""

    ids: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    late_seconds_max: float = 0.0


def measure_outage(
    log_dir: Path,
    *,
    variants: tuple[str, ...],
    rate: float,
    outage_seconds: float,
    reference_payments: int,
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for variant in variants:
        with (
            production_stack(log_dir / variant) as stack,
            autovacuum_stand_in(stack.container.engine) as standing_in,
        ):
            stack.start_api()
            figures[variant] = _one_variant(
                stack, variant, rate, outage_seconds, reference_payments
            )
            figures[variant]["autovacuum_stand_in"] = standing_in
        done = figures[variant]
        print(
            f"  {variant}: {done['accepted']} accepted, {done['parked']['max_seen']} parked, "
            f"{done['succeeded']} succeeded, {done['charged_twice']} charged twice, "
            f"{done['provider_calls']['after_open']} calls after the circuit opened "
            f"(<= {done['provider_calls']['probes_allowed']}), drain "
            f"{done['drain']['per_second']}/s vs pool {done['pool_per_second']}/s, "
            f"{done['messages_per_payment']} messages/payment",
            flush=True,
        )
    return figures


def _one_variant(
    stack: Stack, variant: str, rate: float, outage_seconds: float, reference_payments: int
) -> dict[str, Any]:
    settings = stack.settings
    stack.start_sweeper()
    pool = _pool_speed(stack, reference_payments)
    takeovers_before = _takeovers(stack)
    held_before = _held_at_dispatch(stack)
    simulator = stack.simulator()

    arrivals = Arrivals()
    total_seconds = BEFORE_SECONDS + outage_seconds + AFTER_SECONDS
    run = secrets.token_hex(4)
    load = threading.Thread(
        target=lambda: asyncio.run(_arrive(stack, run, rate, total_seconds, arrivals)),
        name="outage-arrivals",
        daemon=True,
    )
    started = time.time()
    load.start()
    sampler = _Sampler(stack)
    sampler.until(started + BEFORE_SECONDS)
    rule = simulator.add_fault(VARIANTS[variant])
    outage_started = time.time()
    sampler.until(outage_started + outage_seconds)
    simulator.remove_fault(rule["id"])
    recovered = time.time()
    load.join()
    accepted = list(arrivals.ids)
    finished = sampler.until_final(accepted, recovered + 300.0 + len(accepted) / 5)

    return _figures(
        stack,
        settings,
        rate=rate,
        arrivals=arrivals,
        sampler=sampler,
        window=(outage_started, recovered),
        all_final=finished,
        pool=pool,
        takeovers=_takeovers(stack) - takeovers_before,
        held=_held_at_dispatch(stack) - held_before,
    )


def _pool_speed(stack: Stack, count: int) -> dict[str, Any]:
    """The shallow drain: ``count`` payments accepted with no worker, then the default
    worker started (and kept for the outage) drains them against the healthy provider."""
    run = secrets.token_hex(4)
    key = stack.merchant_key
    asyncio.run(
        fixed_count(
            stack.api_url,
            lambda _conn, n: payment_request(key, f"pool-{run}-{n}"),
            concurrency=ACCEPT_CONCURRENCY,
            total=count,
        )
    )
    stack.start_worker_with((), name="worker")
    deadline = time.monotonic() + 120.0 + count / 2
    while stack.count_finished() < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the reference backlog of {count} did not drain")
        time.sleep(0.2)  # polling the database for a condition
    return completion_rate(stack.completion_times())


async def _arrive(stack: Stack, run: str, rate: float, seconds: float, arrivals: Arrivals) -> None:
    """Open loop: payment n is sent at ``n / rate`` whatever the answers to the earlier ones
    take (a slow API must not slow the arrivals down), each on an idle connection."""
    idle: list[Connection] = []
    key = stack.merchant_key
    start = time.monotonic()
    total = int(rate * seconds)

    async def send(n: int) -> None:
        connection = idle.pop() if idle else Connection(stack.api_url)
        try:
            status, body = await connection.send(payment_request(key, f"outage-{run}-{n}"))
        except (OSError, asyncio.IncompleteReadError) as error:
            arrivals.errors[type(error).__name__] = arrivals.errors.get(type(error).__name__, 0) + 1
            await connection.close()
            return
        idle.append(connection)
        arrivals.statuses[status] = arrivals.statuses.get(status, 0) + 1
        if status in (200, 202):
            arrivals.ids.append(str(json.loads(body)["id"]))

    tasks = []
    for n in range(total):
        due = start + n / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))  # the arrival schedule
        arrivals.late_seconds_max = max(arrivals.late_seconds_max, time.monotonic() - due)
        tasks.append(asyncio.create_task(send(n)))
    await asyncio.gather(*tasks)
    for connection in idle:
        await connection.close()


class _Sampler:
    """Reads the circuit and the parked payments once a second while the run goes on."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.parked_max = 0
        self.first_opened_at: float | None = None
        self.states: dict[str, int] = {}

    def until(self, moment: float) -> None:
        while time.time() < moment:
            self.sample()
            time.sleep(min(SAMPLE_SECONDS, max(0.0, moment - time.time())))

    def until_final(self, ids: list[str], deadline: float) -> bool:
        """Sample until every payment in ``ids`` is final; False at the deadline."""
        while time.time() < deadline:
            self.sample()
            if _count_processing(self.stack, ids) == 0:
                return True
            time.sleep(SAMPLE_SECONDS)
        return False

    def sample(self) -> None:
        with self.stack.container.engine.connect() as conn:
            parked = conn.execute(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(payments.c.status == "needs_attention")
            ).scalar_one()
            row = conn.execute(
                sa.select(circuits.c.state, circuits.c.opened_at).where(
                    circuits.c.key == PLATFORM_CIRCUIT_KEY
                )
            ).one_or_none()
        self.parked_max = max(self.parked_max, int(parked))
        if row is not None:
            self.states[row.state] = self.states.get(row.state, 0) + 1
            opened: datetime | None = row.opened_at
            if opened is not None and self.first_opened_at is None:
                self.first_opened_at = opened.timestamp()


def _count_processing(stack: Stack, ids: list[str]) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(payments)
                .where(payments.c.id.in_(ids), payments.c.status == "processing")
            ).scalar_one()
        )


def _figures(
    stack: Stack,
    settings: Settings,
    *,
    rate: float,
    arrivals: Arrivals,
    sampler: _Sampler,
    window: tuple[float, float],
    all_final: bool,
    pool: dict[str, Any],
    takeovers: int,
    held: int,
) -> dict[str, Any]:
    outage_started, recovered = window
    ids = arrivals.ids
    with stack.container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                payments.c.id,
                payments.c.status,
                payments.c.created_at,
                payments.c.completed_at,
                payments.c.last_error,
            ).where(payments.c.id.in_(ids))
        ).all()
    by_status: dict[str, int] = {}
    for row in rows:
        by_status[row.status] = by_status.get(row.status, 0) + 1
    parked = [
        {"id": row.id, "last_error": row.last_error}
        for row in rows
        if row.status == "needs_attention"
    ]
    succeeded = {row.id for row in rows if row.status == "succeeded"}
    charges = stack.simulator().movements()["by_record"]
    calls = _provider_calls(stack, settings, rate, outage_started, recovered, sampler)
    backlog_done = [
        row.completed_at.timestamp()
        for row in rows
        if row.completed_at is not None
        and row.created_at.timestamp() < recovered
        and row.completed_at.timestamp() >= recovered
    ]
    last_done = max(
        (row.completed_at.timestamp() for row in rows if row.completed_at is not None),
        default=None,
    )
    drain = completion_rate(backlog_done)
    drain["ratio"] = ratio(drain["per_second"], pool["per_second"])
    return {
        "rate": rate,
        "outage_seconds": round(recovered - outage_started, 1),
        "settings": {
            "circuit_failures": settings.circuit_failures,
            "circuit_window_seconds": settings.circuit_window_seconds,
            "circuit_open_seconds": settings.circuit_open_seconds,
            "circuit_probes": settings.circuit_probes,
            "circuit_resume_per_second": settings.circuit_resume_per_second,
            "provider_timeout_seconds": settings.provider_timeout_seconds,
        },
        "arrivals": {
            "statuses": {str(k): v for k, v in sorted(arrivals.statuses.items())},
            "errors": arrivals.errors,
            "late_seconds_max": round(arrivals.late_seconds_max, 3),
        },
        "accepted": len(ids),
        "by_status": by_status,
        "all_final": all_final,
        "parked": {
            "max_seen": max(sampler.parked_max, len(parked)),
            "at_end": len(parked),
            "payments": parked[:20],
        },
        "succeeded": len(succeeded),
        "charged_twice": sum(1 for i in ids if charges.get(i, 0) > 1),
        "not_charged": sum(1 for i in succeeded if charges.get(i, 0) == 0),
        "provider_calls": calls,
        "circuit_states_seen": sampler.states,
        "pool": pool,
        "pool_per_second": pool["per_second"],
        "recovery_to_last_done_seconds": (
            round(last_done - recovered, 2) if last_done is not None else None
        ),
        "drain": drain,
        "redispatched": takeovers,
        "held_at_dispatch": held,
        "messages_per_payment": (
            round((len(ids) - held + takeovers) / len(ids), 3) if ids else 0.0
        ),
    }


def _provider_calls(
    stack: Stack,
    settings: Settings,
    rate: float,
    outage_started: float,
    recovered: float,
    sampler: _Sampler,
) -> dict[str, Any]:
    """Requests the simulator received during the outage, and those after the circuit first
    opened (by the simulator's own clock of arrival, ``at``)."""
    during = [
        entry["at"]
        for entry in stack.simulator().requests()
        if outage_started <= entry["at"] < recovered
    ]
    opened = sampler.first_opened_at
    open_for = recovered - opened if opened is not None else 0.0
    return {
        "during_outage": len(during),
        "circuit_first_opened_after_seconds": (
            round(opened - outage_started, 2) if opened is not None else None
        ),
        "before_open": sum(1 for at in during if opened is None or at < opened),
        "after_open": sum(1 for at in during if at >= opened) if opened is not None else None,
        "probes_allowed": probes_allowed(
            open_seconds=settings.circuit_open_seconds,
            probes=settings.circuit_probes,
            circuit_open_for_seconds=open_for,
            arrivals_per_second=rate,
        ),
    }


def _held_at_dispatch(stack: Stack) -> int:
    """Accepted payments the dispatcher did not publish (their circuit was open): the wait
    it wrote instead, under the accept's token (a worker's wait follows its claim, which
    bumps the token; decision 0109)."""
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    lease_events.c.event == "wait",
                    lease_events.c.operation_id.is_(None),
                    lease_events.c.lease_token == INITIAL_LEASE_TOKEN,
                )
            ).scalar_one()
        )


def _takeovers(stack: Stack) -> int:
    with stack.container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(lease_events.c.event == "takeover")
            ).scalar_one()
        )
