"""What every kind whose lease lives on an ``operations`` row shares with the runner: where
its lease is, and the fields its log lines carry (``engine.runner.run_operation``)."""

from __future__ import annotations

from typing import Any

from orchestrator.db.repositories.operations import OperationRepository
from orchestrator.db.uow import UnitOfWork


class OperationRowKind:
    """A kind's ``name``, ``leases`` and ``log_fields``; the kind adds ``run``."""

    name: str

    def leases(self, uow: UnitOfWork) -> OperationRepository:
        return uow.operations

    def log_fields(self, record_id: str) -> dict[str, Any]:
        return {"operation_id": record_id, "kind": self.name}
