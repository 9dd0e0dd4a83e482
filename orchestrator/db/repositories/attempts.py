"""The attempts of a payment that ended in a failover, each with its proof (decision 0086).

Written only by the failover's fenced transaction (``engine.kinds.charge.failover``), after
the payment's own UPDATE found the lease ours: a row here is never written by a worker that
was fenced out, and no failover exists without the row that proves it safe.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.session import Session
from orchestrator.db.tables import payment_attempts
from orchestrator.domain.attempts import EndedAttempt, FailoverCount

c = payment_attempts.c


class AttemptRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add(self, attempt: EndedAttempt) -> None:
        self._db.write(
            payment_attempts.insert().values(
                payment_id=attempt.payment_id,
                number=attempt.number,
                connector_account=attempt.connector_account,
                provider=attempt.provider,
                provider_payment_id=attempt.provider_payment_id,
                status=attempt.status,
                failure=attempt.failure,
                reason=attempt.reason,
                proof=attempt.proof[:1000],
                next_connector_account=attempt.next_connector_account,
                started_at=attempt.started_at,
                ended_at=attempt.ended_at,
            )
        )

    def for_payment(self, payment_id: str) -> list[EndedAttempt]:
        rows = self._db.all(
            sa.select(payment_attempts).where(c.payment_id == payment_id).order_by(c.number)
        )
        return [
            EndedAttempt(
                payment_id=row["payment_id"],
                number=row["number"],
                connector_account=row["connector_account"],
                provider=row["provider"],
                provider_payment_id=row["provider_payment_id"],
                status=row["status"],
                failure=row["failure"],
                reason=row["reason"],
                proof=row["proof"],
                next_connector_account=row["next_connector_account"],
                started_at=row["started_at"],
                ended_at=row["ended_at"],
            )
            for row in rows
        ]

    def failovers_since(self, since: datetime) -> list[FailoverCount]:
        """The failovers that ended an attempt at or after ``since``, by the account left
        and why, most first.  Bounded by time through ``ix_payment_attempts_ended_at``
        (migration 0028): the scan reads the window's rows only, however old the table."""
        count = sa.func.count().label("count")
        rows = self._db.all(
            sa.select(c.connector_account, c.reason, count)
            .where(c.ended_at >= since)
            .group_by(c.connector_account, c.reason)
            .order_by(count.desc(), c.connector_account, c.reason)
        )
        return [
            FailoverCount(row["connector_account"], row["reason"], int(row["count"]))
            for row in rows
        ]
