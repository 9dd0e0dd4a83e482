"""What every kind whose lease lives on an ``operations`` row shares with the runner: where
its lease is, and the fields its log lines carry (``engine.runner.run_operation``); and,
for a kind whose steps are a class of their own (refund, refund sync), what one run of
those steps holds (``OperationSteps``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from orchestrator.db.repositories.operations import OperationRepository
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.operations import OperationRecord
from orchestrator.engine.lease import Lease
from orchestrator.providers.base import PaymentProvider


class OperationRowKind:
    """A kind's ``name``, ``leases`` and ``log_fields``; the kind adds ``run``."""

    name: str

    def leases(self, uow: UnitOfWork) -> OperationRepository:
        return uow.operations

    def log_fields(self, record_id: str) -> dict[str, Any]:
        return {"operation_id": record_id, "kind": self.name}


@dataclass
class OperationSteps(ABC):
    """One run of a kind's steps: the lease it holds and the provider it calls.  The steps
    subclass this and write ``run``, from the record's recovery point to its finish."""

    lease: Lease[OperationRecord]
    provider: PaymentProvider

    @property
    def record(self) -> OperationRecord:
        return self.lease.record

    @abstractmethod
    def run(self) -> None:
        """The kind's steps, from the record's recovery point to its finish."""
