"""The API's Prometheus metrics on a port of their own (``payorch api --metrics-port``).

The API's own port answers the internet; ``/metrics`` there gave anyone the volume of
payments and ran a query per scrape.  The metrics server runs in the process that starts
the API (with ``--workers N``, the supervisor: in multiprocess mode it reports the sum over
the server processes) and samples the database gauges at each scrape, in one short
read-only transaction that counts only unfinished records.
"""

from __future__ import annotations

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.logging import get_logger

log = get_logger(__name__)


def database_gauges(uow: UnitOfWorkFactory) -> metrics.DatabaseGauges:
    """``uow``: read-only units (``Container.read_only_uow``)."""

    def sample() -> metrics.DatabaseSample | None:
        try:
            with uow() as unit:
                records = unit.payments.count_unfinished_by_status(metrics.UNFINISHED_STATUSES)
                oldest = unit.payments.oldest_processing_created_at()
                circuits = {c.key: c.state.value for c in unit.circuits.all()}
                findings = unit.reconciliation.open_counts_by_kind()
                now = unit.now()
        except Exception as error:
            # A scrape during a database outage still returns the process's own series.
            log.warning("metrics_database_sample_failed", error=type(error).__name__)
            return None
        age = 0.0 if oldest is None else (now - oldest).total_seconds()
        return metrics.DatabaseSample(
            records=records, oldest_processing_age=age, circuits=circuits, findings=findings
        )

    return metrics.DatabaseGauges(sample)


def start(uow: UnitOfWorkFactory, *, port: int, host: str) -> int:
    """Serve the API's metrics on ``host:port`` from a daemon thread; the bound port."""
    return metrics.start_metrics_server(port, host, metrics.Role.API, database_gauges(uow))
