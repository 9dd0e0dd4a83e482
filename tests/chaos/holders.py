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

import sqlalchemy as sa

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
