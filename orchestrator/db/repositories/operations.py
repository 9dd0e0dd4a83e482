"""Operation rows (capture, cancel, refund): the idempotent claim, the reads, and the
operation's own steps.  The lease writes are the shared ones (``lease_repository_base``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.repositories.lease_repository_base import LeaseRepositoryBase
from orchestrator.db.session import Row
from orchestrator.db.tables import operations
from orchestrator.db.wake import WAKE_CHANNEL
from orchestrator.domain.lease_state import NEEDS_ATTENTION, PROCESSING
from orchestrator.domain.operations import OperationKindName, OperationRecord, OperationStatus
from orchestrator.domain.states import RecoveryPoint, WaitingFor

c = operations.c
_COMPLETED = RecoveryPoint.COMPLETED.value


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8")


def to_operation(m: Row) -> OperationRecord:
    return OperationRecord(
        id=m["id"],
        kind=OperationKindName(m["kind"]),
        payment_id=m["payment_id"],
        client_id=m["client_id"],
        status=OperationStatus(m["status"]),
        recovery_point=RecoveryPoint(m["recovery_point"]),
        lease_token=m["lease_token"],
        lease_owner=m["lease_owner"],
        locked_until=m["locked_until"],
        next_attempt_at=m["next_attempt_at"],
        attempts=m["attempts"],
        unknown_outcomes=m["unknown_outcomes"],
        step_attempts=m["step_attempts"],
        lookup_pending=bool(m["lookup_pending"]),
        last_error=m["last_error"],
        amount=m["amount"],
        currency=m["currency"],
        reason=m["reason"],
        metadata=dict(m["metadata"] or {}),
        origin=m["origin"],
        provider_object_id=m["provider_object_id"],
        provider_outcome=m["provider_outcome"],
        failure_code=m["failure_code"],
        failure_message=m["failure_message"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        completed_at=m["completed_at"],
        idempotency_key=m["idempotency_key"],
        request_fingerprint=m["request_fingerprint"],
        accepted_response=_utf8(m["accepted_response"]),
        final_response=_utf8(m["final_response"]),
    )


class OperationRepository(LeaseRepositoryBase[OperationRecord]):
    table = operations

    def _to_record(self, row: Any) -> OperationRecord:
        return to_operation(row)

    def _history_ids(self, record: OperationRecord) -> dict[str, str | None]:
        return {"payment_id": record.payment_id, "operation_id": record.id}

    def _history_id_columns(self, updated: sa.CTE) -> dict[str, sa.ColumnElement[Any]]:
        return {"payment_id": updated.c.payment_id, "operation_id": updated.c.id}

    def _parkable(self) -> sa.ColumnElement[bool]:
        return sa.and_(c.status == PROCESSING, c.recovery_point != _COMPLETED)

    def _retryable(self) -> sa.ColumnElement[bool]:
        return sa.and_(c.status == NEEDS_ATTENTION, c.recovery_point != _COMPLETED)

    def _claim_values(self, now: sa.ColumnElement[datetime]) -> dict[str, Any]:
        # A wake-up from now on, while we hold the lease, is kept for our own wait.
        return {"woken_at": None}

    # -- the claim and the reads ----------------------------------------------------------

    def insert_if_absent(
        self, values: dict[str, Any], *, wake: bool = False
    ) -> OperationRecord | None:
        """``INSERT … ON CONFLICT (client_id, kind, idempotency_key) DO NOTHING``: None
        means the key is taken (a replay, or a reuse with another request).

        ``wake`` (PostgreSQL): the same statement sends the payments' NOTIFY
        (``db.wake``: ``'<operation id>:<lease token>'``) for the row it inserted,
        delivered only when the accept commits; a taken key inserts nothing and notifies
        nothing."""
        insert = postgresql.insert if self._db.dialect == "postgresql" else sqlite.insert
        claim = (
            insert(operations)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["client_id", "kind", "idempotency_key"])
            .returning(*operations.c)
        )
        if not wake:
            row = self._db.one(claim)
            return None if row is None else to_operation(row)
        claimed = claim.cte("claimed")
        notify = sa.func.pg_notify(
            sa.literal(WAKE_CHANNEL),
            claimed.c.id + sa.literal(":") + sa.cast(claimed.c.lease_token, sa.Text),
        )
        row = self._db.one(sa.select(claimed, notify.label("payorch_wake")))
        return None if row is None else to_operation(row)

    def find_by_key(
        self, client_id: str, kind: OperationKindName, idempotency_key: str
    ) -> OperationRecord | None:
        row = self._db.one(
            sa.select(operations).where(
                c.client_id == client_id, c.kind == kind.value, c.idempotency_key == idempotency_key
            )
        )
        return None if row is None else to_operation(row)

    def get(self, operation_id: str) -> OperationRecord | None:
        row = self._db.one(sa.select(operations).where(c.id == operation_id))
        return None if row is None else to_operation(row)

    def get_for_client(self, client_id: str, operation_id: str) -> OperationRecord | None:
        row = self._db.one(
            sa.select(operations).where(c.id == operation_id, c.client_id == client_id)
        )
        return None if row is None else to_operation(row)

    def list_for_payment(
        self, payment_id: str, kind: OperationKindName | None = None
    ) -> list[OperationRecord]:
        """Oldest first."""
        query = sa.select(operations).where(c.payment_id == payment_id)
        if kind is not None:
            query = query.where(c.kind == kind.value)
        query = query.order_by(c.created_at, c.id)
        return [to_operation(r) for r in self._db.all(query)]

    def wait(
        self,
        operation_id: str,
        *,
        token: int,
        until: datetime,
        waiting_for: WaitingFor,
        now: datetime,
    ) -> OperationRecord | None:
        """Release the lease as a wait (the provider has not settled yet): no holder,
        re-checked at ``until``; the claim that found out is not a failed attempt, so its
        count is given back.  (An operation row keeps no ``waiting_for``: its recovery point
        and provider object say what the re-check reads.)  A provider event that came while
        we held the lease (``woken_at``) makes the operation due at once."""
        due = sa.case((c.woken_at.is_not(None), now), else_=until)
        return self._update_one(
            "wait",
            self._held(operation_id, token),
            lease_owner=None,
            locked_until=due,
            next_attempt_at=due,
            attempts=sa.case((c.attempts > 0, c.attempts - 1), else_=0),
            woken_at=None,
        )

    # -- the operation's steps, fenced ----------------------------------------------------

    def take_step(
        self, operation_id: str, *, token: int, now: datetime, lease_until: datetime
    ) -> OperationRecord | None:
        """Renew and take the next step number, so the key ``…-{step}-{n}`` is durable
        before it is sent."""
        return self._update_one(
            None,
            self._held(operation_id, token),
            locked_until=lease_until,
            step_attempts=c.step_attempts + 1,
        )

    def record_unknown_outcome(
        self, operation_id: str, *, token: int, error: str, now: datetime
    ) -> OperationRecord | None:
        """Count an unknown outcome: a lookup at the provider is owed before any re-send."""
        return self._update_one(
            None,
            self._held(operation_id, token),
            unknown_outcomes=c.unknown_outcomes + 1,
            lookup_pending=True,
            last_error=error[:2000],
            updated_at=now,
        )

    def end_lookup(self, operation_id: str, *, token: int, now: datetime) -> OperationRecord | None:
        """The lookup read everything and found nothing of ours: nothing is owed."""
        return self._update_one(
            None, self._held(operation_id, token), lookup_pending=False, updated_at=now
        )

    def record_provider_object(
        self, operation_id: str, *, token: int, provider_object_id: str, now: datetime
    ) -> OperationRecord | None:
        """The provider's object is known (pending at the provider): later rounds read it."""
        return self._update_one(
            None,
            self._held(operation_id, token),
            provider_object_id=provider_object_id,
            lookup_pending=False,
            updated_at=now,
        )

    def record_settlement(
        self,
        operation_id: str,
        *,
        token: int,
        outcome: OperationStatus,
        provider_object_id: str | None,
        failure_code: str | None,
        failure_message: str | None,
        now: datetime,
    ) -> OperationRecord | None:
        """What the provider settled (``provider_settled``): a worker that dies before the
        finish leaves a record that needs no further provider call."""
        return self._update_one(
            None,
            sa.and_(
                self._held(operation_id, token),
                c.recovery_point == RecoveryPoint.ACCEPTED.value,
            ),
            recovery_point=RecoveryPoint.PROVIDER_SETTLED.value,
            provider_outcome=outcome.value,
            provider_object_id=sa.func.coalesce(provider_object_id, c.provider_object_id),
            failure_code=failure_code,
            failure_message=failure_message[:1000] if failure_message else None,
            lookup_pending=False,
            updated_at=now,
        )

    def finish(
        self, operation_id: str, *, token: int, final_response: str, now: datetime
    ) -> OperationRecord | None:
        """COMPLETED with the settled outcome as status, fenced."""
        return self._update_one(
            "finish",
            sa.and_(
                self._held(operation_id, token),
                c.recovery_point == RecoveryPoint.PROVIDER_SETTLED.value,
            ),
            status=c.provider_outcome,
            recovery_point=_COMPLETED,
            final_response=final_response,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            completed_at=now,
            updated_at=now,
        )

    # -- refunds made outside payorch (the refund sync) -----------------------------------

    def insert(self, values: dict[str, Any]) -> OperationRecord:
        """A row no client key names (a refund sync, a refund the provider reported)."""
        row = self._db.one(operations.insert().values(**values).returning(*operations.c))
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_operation(row)

    def find_refund_by_provider_id(self, provider_refund_id: str) -> OperationRecord | None:
        row = self._db.one(
            sa.select(operations).where(
                c.kind == OperationKindName.REFUND.value,
                c.provider_object_id == provider_refund_id,
            )
        )
        return None if row is None else to_operation(row)

    def unclaimed_sync(self, payment_id: str) -> OperationRecord | None:
        """A refund sync of the payment that no worker has claimed yet: it will list the
        provider's refunds after now, so a new hint needs no second sync."""
        row = self._db.one(
            sa.select(operations)
            .where(
                c.payment_id == payment_id,
                c.kind == OperationKindName.REFUND_SYNC.value,
                c.status == PROCESSING,
                c.attempts == 0,
                c.lease_owner.is_(None),
            )
            .limit(1)
        )
        return None if row is None else to_operation(row)

    def make_waiting_due(self, operation_id: str, *, now: datetime) -> bool:
        """A waiting operation (no holder, re-check later) is due now: the sweeper's next pass
        dispatches it and it reads the provider's truth.  Nothing else changes: no token, so
        nothing is fenced and nothing is decided here."""
        result = self._db.execute(
            operations.update()
            .where(
                c.id == operation_id,
                c.status == PROCESSING,
                c.lease_owner.is_(None),
                c.next_attempt_at.is_not(None),
                c.next_attempt_at > now,
            )
            .values(next_attempt_at=now, locked_until=now)
        )
        return result == 1
