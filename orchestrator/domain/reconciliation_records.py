"""Reconciliation's stored records: a run and a finding, as the repository returns them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.domain.reconciliation import FindingKind, Phase, RunCounts, RunStatus

RUN_ID_PREFIX = "rcn_"
FINDING_ID_PREFIX = "rcf_"
RUN_ID_PATTERN = "^rcn_[0-9a-f]{24}$"
FINDING_ID_PATTERN = "^rcf_[0-9a-f]{24}$"


@dataclass(frozen=True)
class Run:
    id: str
    connector_account: str
    provider: str
    window_start: datetime
    window_end: datetime
    status: RunStatus
    phase: Phase
    cursor: str | None
    lease_token: int
    counts: RunCounts
    ledger_balanced: bool | None
    ledger_sums: dict[str, int] | None
    error: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Finding:
    id: str
    kind: FindingKind
    connector_account: str
    provider_object_id: str
    object_type: str
    payment_id: str | None
    operation_id: str | None
    ours: dict[str, Any] | None
    theirs: dict[str, Any] | None
    first_run_id: str
    last_run_id: str
    resolution: str  # open, resolved
    resolved_reason: str | None
    resolved_by: str | None
    resolved_by_name: str | None
    resolved_at: datetime | None
    created_at: datetime

    @property
    def open(self) -> bool:
        return self.resolution == "open"
