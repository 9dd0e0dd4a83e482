"""Reconciliation for operators: the runs and their findings as documents
(``GET /v1/ops/reconciliation/runs[/{id}]``, ``payorch reconcile``, ``payorch status``) and
the action that marks a finding explained (decision 0092).

Marking explained is one transaction: the finding moves from open to resolved (compare and
set: a finding is resolved once, and no later run reopens it) with who and why, and the
audit trail gets its row (action ``reconciliation_explained``) naming the finding's payment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.encoding import iso
from orchestrator.domain.reconciliation_records import Finding, Run
from orchestrator.ops.errors import MAX_REASON_LENGTH, OpsConflict, OpsError, clean_reason

EXPLAINED_ACTION = "reconciliation_explained"


class FindingNotFound(OpsError):
    pass


class FindingAlreadyResolved(OpsConflict):
    pass


@dataclass(frozen=True)
class ReconciliationStatus:
    """For ``payorch status``: the last completed run and the open findings by kind."""

    now: datetime
    last_run: Run | None
    open_findings: dict[str, int]

    @property
    def last_run_age_seconds(self) -> float | None:
        finished = self.last_run.finished_at if self.last_run else None
        return None if finished is None else max(0.0, (self.now - finished).total_seconds())


def read_reconciliation_status(uow: UnitOfWork) -> ReconciliationStatus:
    """In the caller's (read-only) unit of work."""
    return ReconciliationStatus(
        now=uow.now(),
        last_run=uow.reconciliation.last_completed_run(),
        open_findings=uow.reconciliation.open_counts_by_kind(),
    )


def reconciliation_status_document(status: ReconciliationStatus) -> dict[str, Any]:
    age = status.last_run_age_seconds
    return {
        "last_run_id": status.last_run.id if status.last_run else None,
        "last_run_age_seconds": None if age is None else round(age, 3),
        "open_findings": sum(status.open_findings.values()),
        "open_findings_by_kind": dict(sorted(status.open_findings.items())),
    }


@dataclass(frozen=True)
class RunView:
    run: Run
    findings: tuple[Finding, ...]


def run_summary(run: Run) -> dict[str, Any]:
    """A run without its findings (the list's entries)."""
    counts = run.counts
    return {
        "id": run.id,
        "connector_account": run.connector_account,
        "provider": run.provider,
        "window": {"since": iso(run.window_start), "until": iso(run.window_end)},
        "status": run.status.value,
        "phase": run.phase.value,
        "counts": {
            "payments_seen": counts.payments_seen,
            "refunds_seen": counts.refunds_seen,
            "matched": counts.matched,
            "foreign": counts.foreign,
            "in_flight": counts.in_flight,
            "findings_new": counts.findings_new,
            "findings_seen_again": counts.findings_seen,
            "pages": counts.pages,
        },
        "ledger_balanced": run.ledger_balanced,
        "ledger_sums": run.ledger_sums,
        "error": run.error,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
    }


def finding_document(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "kind": finding.kind.value,
        "connector_account": finding.connector_account,
        "object_type": finding.object_type,
        "provider_object_id": finding.provider_object_id,
        "payment_id": finding.payment_id,
        "operation_id": finding.operation_id,
        "ours": finding.ours,
        "theirs": finding.theirs,
        "first_run_id": finding.first_run_id,
        "last_run_id": finding.last_run_id,
        "resolution": {
            "status": finding.resolution,
            "reason": finding.resolved_reason,
            "by": finding.resolved_by_name,
            "at": iso(finding.resolved_at),
        },
        "created_at": iso(finding.created_at),
    }


def run_document(view: RunView) -> dict[str, Any]:
    return {**run_summary(view.run), "findings": [finding_document(f) for f in view.findings]}


def read_run(uow: UnitOfWork, run_id: str) -> RunView | None:
    """In the caller's (read-only) unit of work."""
    run = uow.reconciliation.get_run(run_id)
    if run is None:
        return None
    return RunView(run, tuple(uow.reconciliation.findings_of_run(run.id)))


def explain_finding(
    uow: UnitOfWorkFactory, finding_id: str, *, reason: str, actor_id: str, actor_name: str
) -> Finding:
    """Mark a finding explained: resolved, with the reason, by whom, audited."""
    cleaned = clean_reason(reason)
    with uow() as unit:
        now = unit.now()
        resolved = unit.reconciliation.resolve(
            finding_id, reason=cleaned, by=actor_id, by_name=actor_name, now=now
        )
        if resolved is None:
            existing = unit.reconciliation.get_finding(finding_id)
            if existing is None:
                raise FindingNotFound(f"No finding has the id {finding_id}.")
            raise FindingAlreadyResolved(
                f"The finding {finding_id} is already resolved "
                f"({existing.resolved_reason!r} by {existing.resolved_by_name})."
            )
        if resolved.payment_id is not None:
            unit.audit.add(
                actor_client_id=actor_id,
                actor_name=actor_name,
                action=EXPLAINED_ACTION,
                payment_id=resolved.payment_id,
                reason=f"{finding_id} ({resolved.kind.value}): {cleaned}"[:MAX_REASON_LENGTH],
                old_token=None,
                new_token=None,
                now=now,
            )
        unit.commit()
    return resolved
