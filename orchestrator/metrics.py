"""Prometheus metrics.  Defined once here; every process exposes its own.

* The API serves them on ``GET /metrics`` and samples the database gauges (records by
  status, oldest processing age) at each scrape.
* ``payorch worker --metrics-port P`` serves the worker's (provider calls, finished
  payments, fenced writes, takeovers by the beat-driven sweep) on port P.  Celery's prefork
  pool runs tasks in child processes, so the worker runs prometheus_client's multiprocess
  mode (``PROMETHEUS_MULTIPROC_DIR``) and port P serves the sum over its children.
* the sweeper loop, one process, serves its own (takeovers by the sweeper, parked
  payments, keys purged) the same way: ``start_metrics_server`` on its own port
  (``orchestrator.cli.serve.MetricsPort`` is the option to give ``payorch sweeper``).

One port per process, not one shared multiprocess directory for everything: the API,
workers and sweeper run on different hosts (containers), and a scrape per process is what
Prometheus service discovery expects anyway.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
PAYMENT_STATUSES = ("processing", "succeeded", "failed", "needs_attention")
# The operation and outcome labels of orchestrator.providers.instrumented.
PROVIDER_OPERATIONS = ("create", "confirm", "retrieve", "lookup")
PROVIDER_OUTCOMES = ("ok", "declined", "permanent", "retryable", "unknown", "error")
TAKEOVER_ACTORS = ("sweeper", "operator")

PAYMENTS_ACCEPTED = Counter("payorch_payments_accepted_total", "New payments accepted (202).")
REPLAYS_ANSWERED = Counter(
    "payorch_idempotent_replays_total",
    "Requests answered from an existing record, by the record's state.",
    ["state"],
)
KEY_REUSE_CONFLICTS = Counter(
    "payorch_idempotency_key_reuse_conflicts_total",
    "Same Idempotency-Key with a different request (422).",
)
PUBLISH_FAILURES = Counter(
    "payorch_task_publish_failures_total",
    "Task publishes that failed after the record was committed (the sweeper recovers them).",
)
PROVIDER_CALLS = Counter(
    "payorch_provider_calls_total",
    "Provider calls by operation and outcome.",
    ["operation", "outcome"],
)
PROVIDER_LATENCY = Histogram(
    "payorch_provider_call_seconds",
    "Provider call latency by operation.",
    ["operation"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LEASE_TAKEOVERS = Counter(
    "payorch_lease_takeovers_total",
    "Leases taken over, by who took them (sweeper, operator).",
    ["by"],
)
FENCED_WRITES = Counter(
    "payorch_fenced_writes_total",
    "Writes refused because the writer's lease token was stale.",
)
PAYMENTS_FINISHED = Counter(
    "payorch_payments_finished_total", "Payments that reached a final state.", ["status"]
)
PAYMENTS_PARKED = Counter(
    "payorch_payments_needs_attention_total", "Payments moved to needs_attention."
)
# Sampled by the API at each scrape.  With several API processes (multiprocess mode) the
# value of the process that sampled last is the one to report.
RECORDS_BY_STATUS = Gauge(
    "payorch_payment_records",
    "Payment records by status (sampled at scrape).",
    ["status"],
    multiprocess_mode="livemostrecent",
)
OLDEST_PROCESSING_AGE = Gauge(
    "payorch_oldest_processing_age_seconds",
    "Age of the oldest payment still processing (sampled at scrape); 0 when none.",
    multiprocess_mode="livemostrecent",
)
RETENTION_PURGED = Counter(
    "payorch_idempotency_keys_purged_total", "Idempotency keys purged by retention."
)


def _initialise_label_sets() -> None:
    """Every series exists from the start at 0, so a dashboard or an alert (``rate()``,
    ``increase()``) sees the first event instead of a series appearing out of nowhere."""
    for status in PAYMENT_STATUSES:
        REPLAYS_ANSWERED.labels(state=status)
    for operation in PROVIDER_OPERATIONS:
        PROVIDER_LATENCY.labels(operation=operation)
        for outcome in PROVIDER_OUTCOMES:
            PROVIDER_CALLS.labels(operation=operation, outcome=outcome)
    for actor in TAKEOVER_ACTORS:
        LEASE_TAKEOVERS.labels(by=actor)
    for status in ("succeeded", "failed"):
        PAYMENTS_FINISHED.labels(status=status)


_initialise_label_sets()


def multiprocess_mode() -> bool:
    """prometheus_client decides this when it is imported: set the variable before."""
    return bool(os.environ.get(MULTIPROC_DIR_ENV))


def exposition_registry() -> CollectorRegistry:
    """This process's registry, or in multiprocess mode the sum over every process that
    shares the directory (a prefork worker's children, ``payorch api --workers N``)."""
    if not multiprocess_mode():
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


def render() -> tuple[bytes, str]:
    """The text exposition format and its content type (for ``GET /metrics``)."""
    return generate_latest(exposition_registry()), CONTENT_TYPE_LATEST


def start_metrics_server(port: int, host: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread of this process."""
    start_http_server(port, addr=host, registry=exposition_registry())
