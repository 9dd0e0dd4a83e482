"""What an operator sees: leases by state and the audit trail (reads: given a read-only
unit of work, ``Container.read_only_uow``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.lease_state import LeaseState
from orchestrator.domain.model import AuditEntry, PaymentRecord
from orchestrator.domain.operations import OperationRecord

DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000


@dataclass(frozen=True)
class LeaseListing:
    state: LeaseState
    # The database clock the listing was judged by ("expired" means locked_until <= now).
    now: datetime
    # Payments' charges first, then operations (capture, cancel, refund), each in the
    # state's order; at most ``limit`` in all.
    records: list[PaymentRecord | OperationRecord]


def list_leases(
    read_only_uow: UnitOfWorkFactory, state: LeaseState, *, limit: int = DEFAULT_LIST_LIMIT
) -> LeaseListing:
    with read_only_uow() as uow:
        now = uow.now()
        records: list[PaymentRecord | OperationRecord] = []
        records += uow.leases.list_by_state(state, now=now, limit=limit)
        records += uow.operations.list_by_state(state, now=now, limit=limit - len(records))
    return LeaseListing(state=state, now=now, records=records)


def list_audit(
    read_only_uow: UnitOfWorkFactory,
    *,
    payment_id: str | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
) -> list[AuditEntry]:
    """Newest first."""
    with read_only_uow() as uow:
        return uow.audit.list(payment_id=payment_id, limit=limit)
