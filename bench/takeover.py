"""Scenario 4, takeover latency: a worker is SIGKILLed mid-payment (right after the provider
charged, while it waits for the answer), and the payment completes through the sweeper and
another worker.  The figure is kill → completion, beside ``LEASE_SECONDS +
SWEEP_INTERVAL_SECONDS``: the lease was renewed just before the confirm, so the payment can
be taken over one lease after the kill, and the sweeper notices within one interval.

Also reported, on the database's clock: lease expiry → completion (the sweeper's reaction
plus the rescue itself), whose target is one sweep interval.

Two workers (one process each) and one sweeper run; the one holding the lease is killed and
a replacement started, so each sample begins with two workers again.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench.stack import FINISHED, Stack, production_stack
from orchestrator.db.tables import payments
from tests.support.processes import ManagedProcess

# Short leases, so that a sample takes seconds; the order the settings require still holds:
# provider timeout (1 s) < soft limit (0.6 x lease) < hard limit (0.8 x lease) < lease.
TAKEOVER_SETTINGS: dict[str, Any] = {
    "lease_seconds": 5.0,
    "dispatch_lease_seconds": 5.0,
    "sweep_interval_seconds": 1.0,
    "provider_timeout_seconds": 1.0,
    "provider_connect_timeout_seconds": 1.0,
}
FIRST_AMOUNT = 4100


def _process_group(leader: int) -> set[int]:
    members = {leader}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(leader):
            members.add(int(stat.parent.name))
    return members


def _row(stack: Stack, payment_id: str) -> Any:
    with stack.container.engine.connect() as conn:
        return conn.execute(sa.select(payments).where(payments.c.id == payment_id)).one()


def _wait(what: str, condition: Any, timeout: float, poll: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def measure_takeover(log_dir: Path, *, samples: int, seed: int = 4) -> dict[str, Any]:
    lease = float(TAKEOVER_SETTINGS["lease_seconds"])
    interval = float(TAKEOVER_SETTINGS["sweep_interval_seconds"])
    results: list[dict[str, Any]] = []
    # Each sample starts a random part of a sweep interval later: without it every sample
    # would start right after the previous rescue, i.e. right after a sweep pass, and all
    # would meet the sweeper in the same phase.
    rng = random.Random(seed)
    with production_stack(log_dir, **TAKEOVER_SETTINGS) as stack:
        stack.start_api()
        sweeper = stack.start_sweeper()
        workers = [stack.start_worker(1, name=f"worker-{n}") for n in range(2)]
        admin = stack.simulator()
        client = httpx.Client(
            base_url=stack.api_url,
            headers={"Authorization": f"Bearer {stack.merchant_key}"},
            timeout=30,
            trust_env=False,
        )
        try:
            for n in range(samples):
                time.sleep(rng.uniform(0, interval))
                sample = _one_sample(stack, admin, client, workers, FIRST_AMOUNT + n)
                sample["expiry_to_takeover_seconds"] = _pickup(sweeper, sample.pop("expired_at"))
                results.append(sample)
        finally:
            client.close()
            admin.close()
    kill_to_done = [r["kill_to_completion_seconds"] for r in results]
    expiry_to_done = [r["expiry_to_completion_seconds"] for r in results]
    pickups = [r["expiry_to_takeover_seconds"] for r in results if r["expiry_to_takeover_seconds"]]
    return {
        **TAKEOVER_SETTINGS,
        "bound_seconds": lease + interval,
        "samples": results,
        "kill_to_completion": {
            "median_seconds": round(statistics.median(kill_to_done), 3),
            "max_seconds": round(max(kill_to_done), 3),
        },
        "expiry_to_completion": {
            "median_seconds": round(statistics.median(expiry_to_done), 3),
            "max_seconds": round(max(expiry_to_done), 3),
        },
        "expiry_to_takeover": {
            "median_seconds": round(statistics.median(pickups), 3) if pickups else None,
            "max_seconds": round(max(pickups), 3) if pickups else None,
        },
    }


def _pickup(sweeper: ManagedProcess, expired_at: datetime) -> float | None:
    """Seconds from the lease's expiry to the end of the sweep pass that took it over (the
    first pass after the expiry that took anything over; the sweeper's log timestamps and
    the database's clock are the same host clock here)."""
    for line in sweeper.output().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") != "sweep_pass" or not entry.get("taken_over"):
            continue
        at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
        if at >= expired_at:
            return round((at - expired_at).total_seconds(), 3)
    return None


def _one_sample(
    stack: Stack,
    admin: Any,
    client: httpx.Client,
    workers: list[ManagedProcess],
    amount: int,
) -> dict[str, Any]:
    # The provider charges, then holds its answer back: the worker dies in that window.
    admin.add_fault(f"confirm:timeout_after_effect:amounts={amount}:times=1")
    response = client.post(
        "/v1/payments",
        json={"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"},
        headers={"Idempotency-Key": f"takeover-{amount}-{time.time_ns()}"},
    )
    response.raise_for_status()
    payment_id = response.json()["id"]
    _wait(
        "the provider to charge",
        lambda: admin.movements()["by_record"].get(payment_id) == 1,
        timeout=60,
        poll=0.005,
    )
    held = _row(stack, payment_id)
    pid = int(str(held.lease_owner).rsplit(":", 1)[-1])
    [victim] = [w for w in workers if pid in _process_group(w.pid)]
    victim.kill()
    killed = time.monotonic()
    workers.remove(victim)
    replacement = stack.start_worker(1, name=f"{victim.name}-next", wait=False)
    _wait("the takeover to complete the payment", lambda: _finished(stack, payment_id), 120)
    done = time.monotonic()
    workers.append(replacement)
    final = _row(stack, payment_id)
    if final.status != "succeeded" or admin.movements()["by_record"].get(payment_id) != 1:
        raise RuntimeError(f"payment {payment_id} ended {final.status}, not charged once")
    # Both instants on the database's clock: when the killed worker's lease ran out, and when
    # the rescuer finished.
    expiry_to_done = (final.completed_at - held.locked_until).total_seconds()
    _wait("the replacement worker", lambda: "ready." in replacement.output(), 60, poll=0.05)
    return {
        "payment_id": payment_id,
        "kill_to_completion_seconds": round(done - killed, 3),
        "expiry_to_completion_seconds": round(expiry_to_done, 3),
        "lease_token": int(final.lease_token),
        "expired_at": held.locked_until,
    }


def _finished(stack: Stack, payment_id: str) -> bool:
    return str(_row(stack, payment_id).status) in FINISHED
