"""The audit trail of operator actions: who, when, why, and which tokens changed."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from orchestrator.db.repositories.rows import to_audit
from orchestrator.db.session import Session
from orchestrator.db.tables import audit_log
from orchestrator.domain.model import AuditEntry


class AuditRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add(
        self,
        *,
        actor_client_id: str,
        actor_name: str,
        action: str,
        payment_id: str,
        reason: str,
        old_token: int | None,
        new_token: int | None,
        now: datetime,
        operation_id: str | None = None,
    ) -> AuditEntry:
        row = self._db.one(
            audit_log.insert()
            .values(
                actor_client_id=actor_client_id,
                actor_name=actor_name,
                action=action,
                payment_id=payment_id,
                operation_id=operation_id,
                reason=reason,
                old_token=old_token,
                new_token=new_token,
                created_at=now,
            )
            .returning(*audit_log.c)
        )
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_audit(row)

    def list(self, *, payment_id: str | None = None, limit: int = 100) -> list[AuditEntry]:
        query = sa.select(audit_log).order_by(audit_log.c.id.desc()).limit(limit)
        if payment_id is not None:
            query = query.where(audit_log.c.payment_id == payment_id)
        return [to_audit(r) for r in self._db.all(query)]
