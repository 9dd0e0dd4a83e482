"""The on-call overview: what is stuck, at a glance (``GET /v1/ops/status``,
``payorch status``, the console's overview).  A read: given a read-only unit of work
(``Container.read_only_uow``) and the settings (the authentication timeout)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.db.repositories.payment_search import LeaseCounts
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.states import PaymentStatus
from orchestrator.domain.webhooks import WebhookStats
from orchestrator.ops.circuits import CircuitView, read_circuits
from orchestrator.ops.failover_rate import FailoverRate, read_failover_rate
from orchestrator.ops.reconciliation import ReconciliationStatus, read_reconciliation_status
from orchestrator.settings import Settings


@dataclass(frozen=True)
class OpsStatus:
    now: datetime
    by_status: dict[str, int]  # every known status, zeros included
    oldest_processing_age_seconds: float | None
    leases: LeaseCounts
    webhooks: WebhookStats
    # Waiting for their customer for more than half of ACTION_TIMEOUT_SECONDS: the ones
    # about to end canceled / authentication_timeout (information, not "unhealthy":
    # customers abandon checkouts).
    requires_action_past_half_timeout: int = 0
    # Connector accounts' circuits (``ops.circuits``): information, not "unhealthy" (an
    # open circuit is the system waiting a provider out, as designed).
    circuits: tuple[CircuitView, ...] = ()
    # The last completed reconciliation run and the open findings (decision 0092):
    # information, not "unhealthy" (a finding waits for a person, but not urgently).
    reconciliation: ReconciliationStatus | None = None
    # The last hour's payments finished, failovers and failover rate (decision 0097):
    # information, not "unhealthy" (a failover is the system working as designed).
    failover: FailoverRate | None = None

    @property
    def oldest_undelivered_webhook_age_seconds(self) -> float | None:
        oldest = self.webhooks.oldest_pending_created_at
        return None if oldest is None else max(0.0, (self.now - oldest).total_seconds())

    @property
    def needs_attention(self) -> int:
        return self.by_status.get(PaymentStatus.NEEDS_ATTENTION.value, 0)

    @property
    def healthy(self) -> bool:
        """Nothing waits for a person: no parked payment, no lease left expired."""
        return self.needs_attention == 0 and self.leases.expired == 0


def get_status(read_only_uow: UnitOfWorkFactory, settings: Settings) -> OpsStatus:
    with read_only_uow() as uow:
        now = uow.now()
        counts = uow.search.status_counts(now=now)
        half_timeout = timedelta(seconds=settings.action_timeout_seconds / 2)
        past_half = uow.search.waiting_for_customer_since_before(now - half_timeout)
        webhooks = uow.deliveries.stats()
        circuits = read_circuits(uow)
        reconciliation = read_reconciliation_status(uow)
        failover = read_failover_rate(uow, now)
    by_status = {status.value: counts.by_status.get(status.value, 0) for status in PaymentStatus}
    oldest = counts.oldest_processing_created_at
    age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
    return OpsStatus(
        now=now,
        by_status=by_status,
        oldest_processing_age_seconds=age,
        leases=counts.leases,
        webhooks=webhooks,
        requires_action_past_half_timeout=past_half,
        circuits=circuits,
        reconciliation=reconciliation,
        failover=failover,
    )
