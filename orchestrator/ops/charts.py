"""The console's charts (``/ops/charts``, decision 0103): per bucket of the last hour or
day, the payments finished by final status, the success rate, the median and 95th
percentile time to final, the failovers and the webhook backlog.  A read: given a read-only
unit of work (``Container.read_only_uow``); the aggregates are the repository's
(``db.repositories.charts``), the series here are one value per bucket, oldest first.

- finished: payments whose ``completed_at`` falls in the bucket, by their status.  A
  manual-capture payment finishes when it is captured or canceled (``requires_capture``
  sets no ``completed_at``); a parked payment (``needs_attention``) has not finished.
- success rate: succeeded over all finished in the bucket; None (a gap, not 0 %) when
  nothing finished.
- time to final: ``completed_at - created_at`` in seconds; for a manual capture it includes
  the wait for the capture.  None when nothing finished.
- failovers: attempts that ended in a failover (``payment_attempts.ended_at``).
- webhook backlog: deliveries pending at each bucket's end (the last bucket: now).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.chart_window import ChartWindow, Span
from orchestrator.domain.states import PaymentStatus

# The statuses a finished payment can have, in the order the chart stacks them.
FINISHED_STATUSES: tuple[str, ...] = (
    PaymentStatus.SUCCEEDED.value,
    PaymentStatus.FAILED.value,
    PaymentStatus.CANCELED.value,
)


@dataclass(frozen=True)
class Charts:
    window: ChartWindow
    span: Span
    now: datetime
    finished: dict[str, list[int]]  # by status (FINISHED_STATUSES), per bucket
    success_rate: list[float | None]  # 0..1
    p50_seconds: list[float | None]
    p95_seconds: list[float | None]
    failovers: list[int]
    webhook_backlog: list[int]


def read_charts(read_only_uow: UnitOfWorkFactory, window: ChartWindow) -> Charts:
    with read_only_uow() as uow:
        now = uow.now()
        span = Span.ending_with(window, now)
        finished_counts = uow.charts.finished_by_status(span)
        quantiles = uow.charts.time_to_final(span)
        failovers = uow.charts.failovers(span)
        backlog_changes = uow.charts.webhook_backlog_changes(span)
    buckets = range(span.count)
    # A status outside FINISHED_STATUSES with a completed_at would be a bug elsewhere; it
    # is drawn after them rather than dropped.
    statuses = FINISHED_STATUSES + tuple(
        sorted({s for _, s in finished_counts} - set(FINISHED_STATUSES))
    )
    finished = {s: [finished_counts.get((i, s), 0) for i in buckets] for s in statuses}
    totals = [sum(finished[s][i] for s in statuses) for i in buckets]
    succeeded = finished[PaymentStatus.SUCCEEDED.value]
    return Charts(
        window=window,
        span=span,
        now=now,
        finished=finished,
        success_rate=[succeeded[i] / totals[i] if totals[i] else None for i in buckets],
        p50_seconds=[q.p50 if (q := quantiles.get(i)) else None for i in buckets],
        p95_seconds=[q.p95 if (q := quantiles.get(i)) else None for i in buckets],
        failovers=[failovers.get(i, 0) for i in buckets],
        webhook_backlog=list(accumulate(backlog_changes.get(i, 0) for i in buckets)),
    )
