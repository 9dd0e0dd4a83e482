"""Which worker holds which lease: the chaos suite kills and freezes a worker only while it
holds one, so every fault it injects lands on a payment in flight.

A lease's owner is ``hostname:pid`` of the process that claimed it.  With the prefork pool
that is a pool child, and with the default threads pool one of the worker processes its
supervisor forked (``orchestrator/cli/worker/processes.py``), not the ``payorch worker``
process the test started; every child shares
the worker's process group (the test starts each worker in its own session), so a worker's
leases are those whose pid is in its group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from orchestrator.broker import BROKER_HEARTBEAT_SECONDS
from orchestrator.db.tables import payments
from tests.harness.stack import Stack
from tests.support.processes import ManagedProcess, process_group

POLL_SECONDS = 0.02


def leases_held_by(
    stack: Stack, worker: ManagedProcess, table: sa.Table = payments
) -> dict[str, int]:
    """Unfinished records of ``table`` (payments, or operations such as refunds) whose lease
    ``worker`` (or one of its pool children) holds: ``{id: lease token}``."""
    pids = {str(pid) for pid in process_group(worker.pid)}
    with stack.container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(table.c.id, table.c.lease_token, table.c.lease_owner).where(
                table.c.status == "processing", table.c.lease_owner.is_not(None)
            )
        ).all()
    return {
        row.id: int(row.lease_token)
        for row in rows
        if str(row.lease_owner).rsplit(":", 1)[-1] in pids
    }


def lease_tokens(
    stack: Stack, ids: list[str], table: sa.Table = payments
) -> dict[str, tuple[int, str]]:
    """``{id: (lease token, status)}``."""
    with stack.container.engine.connect() as conn:
        rows = conn.execute(
            sa.select(table.c.id, table.c.lease_token, table.c.status).where(table.c.id.in_(ids))
        ).all()
    return {row.id: (int(row.lease_token), str(row.status)) for row in rows}


def wait_until(what: str, condition: Callable[[], bool], timeout: float) -> None:
    """Poll until ``condition()`` holds; generous timeouts, ended as soon as it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def wait_for_leases(
    stack: Stack, worker: ManagedProcess, timeout: float, table: sa.Table = payments
) -> dict[str, int]:
    """Wait until ``worker`` holds at least one lease of ``table``; return what it holds."""
    held: dict[str, int] = {}

    def holds() -> bool:
        nonlocal held
        if worker.poll() is not None:
            raise AssertionError(f"{worker.name} exited:\n{worker.tail()}")
        held = leases_held_by(stack, worker, table)
        return bool(held)

    wait_until(f"{worker.name} to hold a lease", holds, timeout)
    return held


# After a SIGSTOP, a statement the worker had already sent still lands: the re-read that
# checks the freeze waits this long first.
IN_FLIGHT_SECONDS = 0.3
# A frozen worker's connection to RabbitMQ is declared dead after about two missed
# heartbeats; the wake-ups it had prefetched then go back to the queue.  A takeover's
# wake-up can land in that prefetch, so waits for a takeover past a freeze allow for it.
FROZEN_CONSUMER_SECONDS = 2 * BROKER_HEARTBEAT_SECONDS + 15


def freeze_while_holding(
    what: str,
    read: Callable[[], dict[str, Any]],
    pick: Callable[[dict[str, Any]], ManagedProcess | None],
    timeout: float,
) -> tuple[ManagedProcess, dict[str, Any]]:
    """SIGSTOP the worker ``pick`` names for the row ``read`` returns, such that the frozen
    worker still holds the row's lease: same token and owner after the stop, unfinished.

    Between reading the row and the SIGSTOP landing, the worker may have released the lease
    (a deferred retry, a wait): frozen then, it holds nothing, and neither the takeover nor
    the fenced write after its resume happen.  So the row is read again once the worker is
    stopped; if it moved, the worker is resumed and the next hold is waited for.  Returns
    the frozen worker and the row as it held it."""
    deadline = time.monotonic() + timeout
    while True:
        row = read()
        victim = pick(row)
        if victim is not None:
            victim.pause()
            time.sleep(IN_FLIGHT_SECONDS)
            after = read()
            same = (after["lease_token"], after["lease_owner"]) == (
                row["lease_token"],
                row["lease_owner"],
            )
            if same and after["status"] == "processing" and after["lease_owner"] is not None:
                return victim, row
            victim.resume()
            assert after["status"] == "processing", f"{what}: finished before a freeze held it"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_SECONDS)
