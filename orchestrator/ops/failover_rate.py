"""The failover rate of the last hour for the overview (``payorch status``,
``GET /v1/ops/status``, the console; decision 0097).

The rate is the metrics' one (``payorch_failovers_total`` over
``payorch_route_attempts_total``) read from the rows: of the attempts that ended in the
window, the share that ended in a failover.  An attempt ends either in a failover (a row of
``payment_attempts``, by its ``ended_at``) or with its payment's final status (the payment's
``completed_at``), so the attempts ended are ``finished + failovers``.  No attempt ended: the
rate is 0, not a division by zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.attempts import FailoverCount

WINDOW = timedelta(hours=1)
# The overview lists the largest (account, reason) pairs only; the total counts them all.
TOP = 5


@dataclass(frozen=True)
class FailoverRate:
    since: datetime
    payments_finished: int
    by_account_reason: tuple[FailoverCount, ...]  # most first, every pair

    @property
    def failovers(self) -> int:
        return sum(entry.count for entry in self.by_account_reason)

    @property
    def attempts_ended(self) -> int:
        return self.payments_finished + self.failovers

    @property
    def rate(self) -> float:
        ended = self.attempts_ended
        return 0.0 if ended == 0 else self.failovers / ended

    @property
    def top(self) -> tuple[FailoverCount, ...]:
        return self.by_account_reason[:TOP]


def read_failover_rate(uow: UnitOfWork, now: datetime) -> FailoverRate:
    """In the caller's (read-only) unit of work; ``now`` is the database clock."""
    since = now - WINDOW
    return FailoverRate(
        since=since,
        payments_finished=uow.search.finished_since(since),
        by_account_reason=tuple(uow.attempts.failovers_since(since)),
    )


def failover_rate_document(failover: FailoverRate) -> dict[str, Any]:
    return {
        "window_seconds": int(WINDOW.total_seconds()),
        "payments_finished": failover.payments_finished,
        "failovers": failover.failovers,
        "attempts_ended": failover.attempts_ended,
        "failover_rate": round(failover.rate, 4),
        "top_failovers": [
            {
                "connector_account": entry.connector_account,
                "reason": entry.reason,
                "failovers": entry.count,
            }
            for entry in failover.top
        ],
    }
