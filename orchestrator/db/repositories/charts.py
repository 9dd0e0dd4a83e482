"""The console's chart reads (decision 0103): aggregates per time bucket of a ``Span``, each
answered by bucket index (0 the oldest), buckets with nothing left out.  Read-only named
queries.

Every query is bounded by the window through an index on the time it buckets by, so its
cost follows the rows of the window, never the table:

- payments finished, by status, and their time to final: ``ix_payments_completed``
  (migration 0028, partial on ``completed_at IS NOT NULL``);
- failovers: ``ix_payment_attempts_ended_at`` (0028);
- the webhook backlog: the deliveries pending now (``ix_webhook_deliveries_due``, partial on
  ``pending``) and those settled inside the window (``ix_webhook_deliveries_settled``, 0029).

The bucket of a time is computed in the database and grouped there; only one row per
bucket comes back.  PostgreSQL: ``width_bucket`` over the epoch, percentiles with
``percentile_cont``.  SQLite (the embedded default, whose console draws the same charts)
has neither: whole seconds since the span's start divided by the width, and the percentiles
computed here from the window's (bucket, seconds) rows.

The bucket is computed in a subquery and grouped on in the outer query: PostgreSQL compares
GROUP BY expressions textually, and the same expression with its own bound parameters in
the select list and in GROUP BY would be two different expressions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa

from orchestrator.db.session import Session
from orchestrator.db.tables import payment_attempts, payments, webhook_deliveries, webhook_endpoints
from orchestrator.domain.chart_window import Quantiles, Span, percentile_cont
from orchestrator.domain.webhooks import DeliveryStatus, EndpointStatus

p = payments.c
a = payment_attempts.c
d = webhook_deliveries.c
e = webhook_endpoints.c


class ChartRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def finished_by_status(self, span: Span) -> dict[tuple[int, str], int]:
        """Payments that reached a final status in each bucket (by ``completed_at``), by
        that status: ``{(bucket, status): count}``."""
        inner = (
            sa.select(self._bucket(p.completed_at, span).label("bucket"), p.status)
            .where(*_finished_in(span))
            .subquery()
        )
        rows = self._db.all(
            sa.select(inner.c.bucket, inner.c.status, sa.func.count().label("count")).group_by(
                inner.c.bucket, inner.c.status
            )
        )
        return {(int(r["bucket"]), r["status"]): int(r["count"]) for r in rows}

    def time_to_final(self, span: Span) -> dict[int, Quantiles]:
        """The median and 95th percentile of ``completed_at - created_at``, in seconds, of
        the payments finished in each bucket."""
        if self._db.dialect == "postgresql":
            seconds = sa.extract("epoch", p.completed_at - p.created_at)
            inner = (
                sa.select(self._bucket(p.completed_at, span).label("bucket"), seconds.label("s"))
                .where(*_finished_in(span))
                .subquery()
            )
            rows = self._db.all(
                sa.select(
                    inner.c.bucket,
                    sa.func.percentile_cont(0.5).within_group(inner.c.s).label("p50"),
                    sa.func.percentile_cont(0.95).within_group(inner.c.s).label("p95"),
                ).group_by(inner.c.bucket)
            )
            return {int(r["bucket"]): Quantiles(float(r["p50"]), float(r["p95"])) for r in rows}
        by_bucket: dict[int, list[float]] = defaultdict(list)
        for r in self._db.all(
            sa.select(
                self._bucket(p.completed_at, span).label("bucket"), p.created_at, p.completed_at
            ).where(*_finished_in(span))
        ):
            by_bucket[int(r["bucket"])].append(
                (r["completed_at"] - r["created_at"]).total_seconds()
            )
        quantiles: dict[int, Quantiles] = {}
        for bucket, values in by_bucket.items():
            values.sort()
            quantiles[bucket] = Quantiles(
                percentile_cont(values, 0.5), percentile_cont(values, 0.95)
            )
        return quantiles

    def failovers(self, span: Span) -> dict[int, int]:
        """Attempts that ended in a failover in each bucket (by ``ended_at``)."""
        inner = (
            sa.select(self._bucket(a.ended_at, span).label("bucket"))
            .where(a.ended_at >= span.start, a.ended_at < span.end)
            .subquery()
        )
        rows = self._db.all(
            sa.select(inner.c.bucket, sa.func.count().label("count")).group_by(inner.c.bucket)
        )
        return {int(r["bucket"]): int(r["count"]) for r in rows}

    def webhook_backlog_changes(self, span: Span) -> dict[int, int]:
        """How the count of pending deliveries changed in each bucket: +1 when one was
        created, -1 when it settled (delivered or failed, by its ``updated_at``).  A delivery
        created before the span counts in bucket 0, so the running sum is the backlog at each
        bucket's end (``ops.charts``).

        Only deliveries pending now or settled inside the span can have been pending in it;
        of those, only the ones to endpoints enabled now, as ``payorch status``'s backlog
        counts (so the last bucket's backlog is that number).  A delivery redelivered after
        settling counts as pending since it was created: its earlier settling is not kept."""
        enabled = webhook_deliveries.join(webhook_endpoints, e.id == d.endpoint_id)
        live = (
            e.status == EndpointStatus.ENABLED.value,
            e.deleted_at.is_(None),
        )
        created = sa.case((d.created_at < span.start, 0), else_=self._bucket(d.created_at, span))
        pending = d.status == DeliveryStatus.PENDING.value
        settled_in_span = (
            d.status != DeliveryStatus.PENDING.value,
            d.updated_at >= span.start,
            d.updated_at < span.end,
        )
        changes = sa.union_all(
            sa.select(created.label("bucket"), sa.literal(1).label("change"))
            .select_from(enabled)
            .where(pending, *live),
            sa.select(created.label("bucket"), sa.literal(1).label("change"))
            .select_from(enabled)
            .where(*settled_in_span, *live),
            sa.select(
                self._bucket(d.updated_at, span).label("bucket"), sa.literal(-1).label("change")
            )
            .select_from(enabled)
            .where(*settled_in_span, *live),
        ).subquery()
        rows = self._db.all(
            sa.select(changes.c.bucket, sa.func.sum(changes.c.change).label("change")).group_by(
                changes.c.bucket
            )
        )
        return {int(r["bucket"]): int(r["change"]) for r in rows}

    def _bucket(self, column: sa.ColumnElement[Any], span: Span) -> sa.ColumnElement[int]:
        """The 0-based bucket of ``column`` (a time inside the span)."""
        if self._db.dialect == "postgresql":
            start = float(span.start_epoch)
            end = float(span.start_epoch + span.width_seconds * span.count)
            return (
                sa.func.width_bucket(
                    sa.extract("epoch", column),
                    sa.literal(start, sa.Float),
                    sa.literal(end, sa.Float),
                    sa.literal(span.count, sa.Integer),
                )
                - 1
            )
        # SQLite stores UTC text; strftime('%s') reads its whole seconds.  The span starts on
        # a whole second and its width is whole seconds, so the division is exact.
        seconds = sa.cast(sa.func.strftime("%s", column), sa.Integer)
        return (seconds - sa.literal(span.start_epoch, sa.Integer)) // sa.literal(
            span.width_seconds, sa.Integer
        )


def _finished_in(span: Span) -> tuple[sa.ColumnElement[bool], ...]:
    # IS NOT NULL is implied by the range, and written out so the planner matches the
    # partial index's predicate without having to prove it.
    return (
        p.completed_at.is_not(None),
        p.completed_at >= span.start,
        p.completed_at < span.end,
    )
