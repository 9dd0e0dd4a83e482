"""Provider-call rows written by the lease UPDATE that follows their call (PostgreSQL).

``engine.call_log`` holds a call's row until the run's next fenced write.  When that write
is one statement in a unit of its own (``Lease.write(one_statement=True)``: the charge's
T2, which stores the created intent and takes the confirm number), the rows ride in the
statement itself, as a data-modifying CTE::

    WITH c AS (INSERT INTO provider_calls … VALUES (…), (…))
    UPDATE payments SET … WHERE id = … AND lease_token = … RETURNING …

In autocommit that is one round trip where a transaction took three (BEGIN, the UPDATE,
the INSERT with the COMMIT).  Hazards, and how they are kept:

* a CTE's INSERT runs whether or not the UPDATE finds its row: a fenced write still
  stores its calls, which is what ``call_log.write_alone`` does for a fenced transaction;
  so ``Lease.write`` writes nothing again once the statement ran (``written``);
* the rows commit with the statement only in autocommit: ``UnitOfWork.carry_calls``
  arms the carrier only on such a unit, so a statement inside a transaction never takes
  rows that a rollback would lose without anyone writing them again;
* an asynchronous interruption (Celery's soft time limit) that lands between the
  statement's return and ``Lease.write`` reading ``written`` makes it write the rows a
  second time: a duplicate evidence row in that window, never a lost one;
* a call that names only a provider object (no payment: ``_CALL_INSERT_BY_OBJECT``) is
  not carried; its write takes the ordinary path.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.tables import provider_calls
from orchestrator.domain.history import ProviderCallRecord

# Every column but the id, in the order of the INSERT.
_COLUMNS = tuple(column.name for column in provider_calls.c if column.name != "id")

# ``count`` rows -> the CTE that inserts them (built once per count by ``rows_cte``).
_CTES: dict[int, sa.CTE] = {}
_BUILDING = threading.Lock()


def call_values(call: ProviderCallRecord, now: datetime) -> dict[str, Any]:
    """A provider-call row's values (``created_at`` is the database clock of the write
    that stores it), cut to their columns' lengths."""
    return {
        "payment_id": call.payment_id,
        "operation": call.operation,
        "method": call.method,
        "path": call.path[:300],
        "idempotency_key": call.idempotency_key,
        "outcome": call.outcome,
        "http_status": call.http_status,
        "provider_object_id": call.provider_object_id,
        "provider_status": call.provider_status,
        "error": None if call.error is None else call.error[:500],
        "latency_ms": call.latency_ms,
        "created_at": now,
    }


def _name(index: int, column: str) -> str:
    return f"c{index}_{column}"


def rows_cte(count: int) -> sa.CTE:
    """``INSERT INTO provider_calls`` of ``count`` rows, their values the parameters
    ``c{i}_{column}``, as a CTE to add to a statement."""
    cte = _CTES.get(count)
    if cte is None:
        with _BUILDING:
            cte = _CTES.get(count)
            if cte is None:
                rows = [
                    {
                        column: sa.bindparam(_name(i, column), type_=provider_calls.c[column].type)
                        for column in _COLUMNS
                    }
                    for i in range(count)
                ]
                cte = _CTES[count] = provider_calls.insert().values(rows).cte("c")
    return cte


class CarriedCalls:
    """One unit of work's rows for its next prebuilt lease UPDATE (see the module)."""

    def __init__(self) -> None:
        self._params: dict[str, Any] = {}
        self._count = 0
        self.written = False  # the statement that carried them ran: they are stored

    def carry(self, calls: list[ProviderCallRecord], now: datetime) -> None:
        """Arm with ``calls`` (nothing when any of them names no payment)."""
        if not calls or any(call.payment_id is None for call in calls):
            return
        self._params = {
            _name(i, column): value
            for i, call in enumerate(calls)
            for column, value in call_values(call, now).items()
        }
        self._count = len(calls)

    @property
    def armed(self) -> bool:
        """Whether rows wait for the next statement."""
        return self._count > 0

    def take(self) -> tuple[int, dict[str, Any]]:
        """How many rows the next statement carries and their parameters; the carrier is
        empty afterwards."""
        count, params = self._count, self._params
        self._count, self._params = 0, {}
        return count, params
