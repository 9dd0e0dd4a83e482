"""Prometheus metrics.  Defined once here; every process exposes its own, and only its own.

Each series belongs to the process roles that can move it (``ROLE_SERIES``); a process
exports its role's series and nothing else, so the API's ``/metrics`` does not show the
workers' provider calls at a reassuring 0:

* ``api``: ``payorch api --metrics-port P`` (never on the API's own port, which the
  internet may reach); accepts, replays, HTTP requests, operator takeovers, and the database
  gauges (unfinished records by status, oldest processing age), sampled at each scrape.
* ``worker``: ``payorch worker --metrics-port P``; provider calls, finished payments,
  fenced writes, and what a beat-driven sweep does.  Celery's prefork pool runs tasks in
  child processes, so the worker runs prometheus_client's multiprocess mode
  (``PROMETHEUS_MULTIPROC_DIR``) and port P serves the sum over its children.
* ``sweeper``: ``payorch sweeper --metrics-port P``; takeovers, parked payments, publish
  failures, keys purged.
* ``relay``: ``payorch relay --metrics-port P``; webhook attempts by outcome, events fanned
  out, and the webhook gauges (backlog, oldest undelivered age, disabled endpoints), sampled
  by the relay loop.

One port per process, not one shared multiprocess directory for everything: the API,
workers and sweeper run on different hosts (containers), and a scrape per process is what
Prometheus service discovery expects anyway.  The ``*_created`` series are disabled: they
double the exposition and no alert or dashboard here uses them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

disable_created_metrics()  # type: ignore[no-untyped-call]


class Role(StrEnum):
    """Which kind of process exports the metrics."""

    API = "api"
    WORKER = "worker"
    SWEEPER = "sweeper"
    RELAY = "relay"


MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
PAYMENT_STATUSES = ("processing", "succeeded", "failed", "canceled", "needs_attention")
# The operation and outcome labels of orchestrator.providers.observed.
PROVIDER_OPERATIONS = (
    "create",
    "confirm",
    "retrieve",
    "lookup",
    "details",
    "capture",
    "cancel",
    "refund",
    "retrieve_refund",
    "list_refunds",
)
PROVIDER_OUTCOMES = ("ok", "declined", "permanent", "retryable", "unknown", "error")
TAKEOVER_ACTORS = ("sweeper", "operator")
# orchestrator.domain.webhooks.AttemptOutcome (kept literal: metrics imports nothing of ours).
WEBHOOK_OUTCOMES = (
    "delivered",
    "gone",
    "http_error",
    "timeout",
    "connect_error",
    "refused_target",
    "error",
)

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
# orchestrator.db.async_session: why an accept on the event loop went to the thread path.
ACCEPT_LOOP_FALLBACK_REASONS = ("busy", "connect_failed")
ACCEPT_LOOP_FALLBACKS = Counter(
    "payorch_accept_loop_fallbacks_total",
    "Accepts the event loop handed to the thread path: every loop connection busy past the "
    "wait (busy), or a connection that could not be opened (connect_failed).",
    ["reason"],
)
WAKEUPS_DISPATCHED = Counter(
    "payorch_wakeups_dispatched_total",
    "Accepted payments whose NOTIFY the dispatcher published as a task (PAYORCH_WAKE_UP=notify).",
)
WAKEUPS_HELD = Counter(
    "payorch_wakeups_held_total",
    "Accepted payments the dispatcher did not publish because their connector account's "
    "circuit was open: it wrote their wait instead, and the sweeper publishes each once the "
    "circuit lets calls through again.",
)
PUBLISH_FAILURES = Counter(
    "payorch_task_publish_failures_total",
    "Task publishes that failed after the record was committed (the sweeper recovers them).",
)
WAKE_UPS_QUEUED = Gauge(
    "payorch_wake_ups_queued",
    "Wake-ups ready in the broker's queue, as the sweeper last read it (its re-dispatch "
    "leaves alone the payments whose wake-up may still be among them).",
    # A worker's sweeps (payorch beat) run in its children: the latest read wins.
    multiprocess_mode="livemostrecent",
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
OPERATIONS_ACCEPTED = Counter(
    "payorch_operations_accepted_total",
    "Operations after the charge (capture, cancel, refund) accepted, by kind.",
    ["kind"],
)
OPERATIONS_FINISHED = Counter(
    "payorch_operations_finished_total",
    "Operations after the charge (capture, cancel, refund) that reached a final state.",
    ["kind", "status"],
)
PAYMENTS_PARKED = Counter(
    "payorch_payments_needs_attention_total", "Payments moved to needs_attention."
)
WORKER_PREFETCH_LIMIT = Gauge(
    "payorch_worker_prefetch_limit",
    "Messages a threads-pool worker takes at once, set from the provider calls in progress "
    "(summed over the worker's processes).",
    multiprocess_mode="livesum",
)
# The database gauges (unfinished records by status, oldest processing age) are not
# Gauges of this process: the API's metrics server samples them at each scrape
# (``DatabaseGauges``), so several API processes never report several samples.
RECORDS_SERIES = "payorch_payment_records"
OLDEST_PROCESSING_SERIES = "payorch_oldest_processing_age_seconds"
CIRCUIT_STATE_SERIES = "payorch_circuit_state"
RECONCILIATION_FINDINGS_SERIES = "payorch_reconciliation_findings"
# Reconciliation's finding kinds (domain.reconciliation.FindingKind), each a series from the
# start so an alert on any of them sees its first finding.
FINDING_KINDS = (
    "orphan_at_provider",
    "missing_at_provider",
    "amount_mismatch",
    "status_mismatch",
    "refund_mismatch",
    "ledger_imbalance",
)
# The stored statuses counted: the unfinished ones, each a small and indexed set (a count of
# every succeeded payment would be a scan of the table's history at every scrape).
UNFINISHED_STATUSES = ("processing", "requires_capture", "needs_attention")
# Series a role's metrics server adds from a collector of its own (sampled at scrape), not
# from this process's registry.
SAMPLED_SERIES: dict[str, frozenset[str]] = {
    "api": frozenset(
        {
            RECORDS_SERIES,
            OLDEST_PROCESSING_SERIES,
            CIRCUIT_STATE_SERIES,
            RECONCILIATION_FINDINGS_SERIES,
        }
    )
}
RETENTION_PURGED = Counter(
    "payorch_idempotency_keys_purged_total", "Idempotency keys purged by retention."
)
# HTTP, by route template (never the raw path: one series per payment id would grow
# without bound).  Requests no route matched are "unmatched"; those the middleware refused
# before routing (431, control characters) are "refused".
HTTP_REQUESTS = Counter(
    "payorch_http_requests_total",
    "HTTP requests answered by the API, by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "payorch_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route template.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

WEBHOOK_ATTEMPTS = Counter(
    "payorch_webhook_attempts_total",
    "Webhook delivery attempts by outcome (delivered, gone, http_error, timeout, "
    "connect_error, refused_target, error).",
    ["outcome"],
)
WEBHOOK_EVENTS_PUBLISHED = Counter(
    "payorch_webhook_events_published_total",
    "Outbox events fanned out to the subscribed endpoints' deliveries.",
)
WEBHOOK_ENDPOINTS_DISABLED = Counter(
    "payorch_webhook_endpoints_disabled_total",
    "Endpoints the relay disabled, by why (gone: answered 410; failing: failed for the "
    "whole retry window).",
    ["reason"],
)
WEBHOOK_BACKLOG = Gauge(
    "payorch_webhook_backlog",
    "Pending deliveries to enabled endpoints (sampled by the relay).",
    multiprocess_mode="livemostrecent",
)
WEBHOOK_OLDEST_PENDING_AGE = Gauge(
    "payorch_webhook_oldest_undelivered_age_seconds",
    "Age of the oldest pending delivery to an enabled endpoint; 0 when none.",
    multiprocess_mode="livemostrecent",
)
WEBHOOK_DISABLED_ENDPOINTS = Gauge(
    "payorch_webhook_disabled_endpoints",
    "Webhook endpoints currently disabled (sampled by the relay).",
    multiprocess_mode="livemostrecent",
)

# Connector accounts' circuits (decision 0082): the state is sampled by the API's metrics
# server at each scrape from the circuits table (every host's truth; ``DatabaseGauges``);
# transitions are counted by the worker whose call made them.
CIRCUIT_STATES = ("closed", "half_open", "open")
CIRCUIT_TRANSITIONS = Counter(
    "payorch_circuit_transitions_total",
    "Circuit state changes, by connector account and the state entered.",
    ["connector_account", "to"],
)
# Failover (decision 0086): each attempt of a route that ended, by its connector account and
# how it ended (``failed_over``, or the payment's final status), and each failover by the
# account it left and why.  Counted by the worker whose transaction ended the attempt.
ROUTE_ATTEMPTS = Counter(
    "payorch_route_attempts_total",
    "Attempts of a payment at one connector account that ended, by account and outcome.",
    ["connector_account", "outcome"],
)
FAILOVERS = Counter(
    "payorch_failovers_total",
    "Payments moved to the next account of their route, by the account left and the reason.",
    ["connector_account", "reason"],
)

# Who moves what.  The sweep runs in the sweeper loop and, under ``payorch beat``, inside
# workers, so workers export the sweep's series too.
_SWEEP_SERIES = (
    "payorch_lease_takeovers_total",
    "payorch_payments_needs_attention_total",
    "payorch_task_publish_failures_total",
    "payorch_idempotency_keys_purged_total",
    "payorch_wake_ups_queued",
)
ROLE_SERIES: dict[Role, frozenset[str]] = {
    Role.API: frozenset(
        {
            "payorch_payments_accepted_total",
            "payorch_idempotent_replays_total",
            "payorch_idempotency_key_reuse_conflicts_total",
            "payorch_accept_loop_fallbacks_total",
            "payorch_task_publish_failures_total",
            "payorch_lease_takeovers_total",  # operator takeovers through the ops API
            "payorch_payments_needs_attention_total",  # a takeover that parks
            "payorch_http_requests_total",
            "payorch_http_request_duration_seconds",
            "payorch_operations_accepted_total",  # refunds, captures and cancels accepted
        }
    ),
    Role.WORKER: frozenset(
        {
            "payorch_provider_calls_total",
            "payorch_provider_call_seconds",
            "payorch_fenced_writes_total",
            "payorch_payments_finished_total",
            "payorch_operations_accepted_total",  # a refund the refund sync found
            "payorch_operations_finished_total",
            "payorch_worker_prefetch_limit",
            "payorch_circuit_transitions_total",
            "payorch_route_attempts_total",
            "payorch_failovers_total",
            *_SWEEP_SERIES,
        }
    ),
    # The sweeper also hosts the dispatcher (PAYORCH_WAKE_UP=notify).
    Role.SWEEPER: frozenset(
        {*_SWEEP_SERIES, "payorch_wakeups_dispatched_total", "payorch_wakeups_held_total"}
    ),
    Role.RELAY: frozenset(
        {
            "payorch_webhook_attempts_total",
            "payorch_webhook_events_published_total",
            "payorch_webhook_endpoints_disabled_total",
            "payorch_webhook_backlog",
            "payorch_webhook_oldest_undelivered_age_seconds",
            "payorch_webhook_disabled_endpoints",
            "payorch_fenced_writes_total",  # a delivery's lease taken by another relay
        }
    ),
}


def _initialise_label_sets() -> None:
    """Every series exists from the start at 0, so a dashboard or an alert (``rate()``,
    ``increase()``) sees the first event instead of a series appearing out of nowhere."""
    for status in PAYMENT_STATUSES:
        REPLAYS_ANSWERED.labels(state=status)
    for reason in ACCEPT_LOOP_FALLBACK_REASONS:
        ACCEPT_LOOP_FALLBACKS.labels(reason=reason)
    for operation in PROVIDER_OPERATIONS:
        PROVIDER_LATENCY.labels(operation=operation)
        for outcome in PROVIDER_OUTCOMES:
            PROVIDER_CALLS.labels(operation=operation, outcome=outcome)
    for actor in TAKEOVER_ACTORS:
        LEASE_TAKEOVERS.labels(by=actor)
    for status in ("succeeded", "failed"):
        PAYMENTS_FINISHED.labels(status=status)
        for kind in ("capture", "cancel", "refund", "refund_sync"):
            OPERATIONS_FINISHED.labels(kind=kind, status=status)
    for kind in ("capture", "cancel", "refund"):
        OPERATIONS_ACCEPTED.labels(kind=kind)
    for outcome in WEBHOOK_OUTCOMES:
        WEBHOOK_ATTEMPTS.labels(outcome=outcome)
    for reason in ("gone", "failing"):
        WEBHOOK_ENDPOINTS_DISABLED.labels(reason=reason)


_initialise_label_sets()


def multiprocess_mode() -> bool:
    """prometheus_client decides this when it is imported: set the variable before."""
    return bool(os.environ.get(MULTIPROC_DIR_ENV))


def forget_process(pid: int) -> None:
    """In multiprocess mode, drop the live gauges of a process that exited (its counters
    stay in the sum)."""
    if multiprocess_mode():
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


class _RoleFilter(Collector):
    """The payorch series of one role from another collector; other series (the process
    and platform collectors' ``process_*``, ``python_*``) pass through."""

    def __init__(self, source: Collector, role: Role) -> None:
        self._source = source
        # prometheus_client names a counter's family without its "_total" suffix.
        self._allowed = frozenset(name.removesuffix("_total") for name in ROLE_SERIES[role])

    def collect(self) -> Iterable[Metric]:
        return _only(self._source.collect(), self._allowed)

    def describe(self) -> Iterable[Metric]:
        return []  # no name-collision checks: the names come from the source


def _only(families: Iterable[Metric], allowed: frozenset[str]) -> Iterator[Metric]:
    for family in families:
        if not family.name.startswith("payorch_") or family.name in allowed:
            yield family


@dataclass(frozen=True)
class DatabaseSample:
    """What the database gauges show: unfinished records by stored status, and how long
    the oldest ``processing`` one not waiting for its customer has waited (seconds; 0 when
    none)."""

    records: dict[str, int]
    oldest_processing_age: float
    # Each circuit's state by its key (connector account, or the platform's own).
    circuits: dict[str, str] = field(default_factory=dict)
    # Open reconciliation findings by kind (decision 0092).
    findings: dict[str, int] = field(default_factory=dict)


class DatabaseGauges(Collector):
    """``payorch_payment_records`` and ``payorch_oldest_processing_age_seconds``, sampled at
    each scrape by ``sample`` (None: the database did not answer; the scrape still returns
    the process's own series, and these are left out rather than reported as 0)."""

    def __init__(self, sample: Callable[[], DatabaseSample | None]) -> None:
        self._sample = sample

    def collect(self) -> Iterable[Metric]:
        sampled = self._sample()
        if sampled is None:
            return []
        records = GaugeMetricFamily(
            RECORDS_SERIES,
            "Unfinished payment records by stored status (sampled at scrape).",
            labels=["status"],
        )
        for status in UNFINISHED_STATUSES:
            records.add_metric([status], sampled.records.get(status, 0))
        oldest = GaugeMetricFamily(
            OLDEST_PROCESSING_SERIES,
            "Age of the oldest payment still processing, as payorch status counts it (one "
            "waiting for its customer is requires_action, not processing; sampled at "
            "scrape); 0 when none.",
            value=max(sampled.oldest_processing_age, 0.0),
        )
        circuits = GaugeMetricFamily(
            CIRCUIT_STATE_SERIES,
            "A connector account's circuit: 0 closed, 1 half-open, 2 open (sampled at scrape; "
            "the platform's own account is ca_platform_stripe).",
            labels=["connector_account"],
        )
        for key, state in sorted(sampled.circuits.items()):
            circuits.add_metric([key], CIRCUIT_STATES.index(state))
        findings = GaugeMetricFamily(
            RECONCILIATION_FINDINGS_SERIES,
            "Open reconciliation findings by kind (sampled at scrape; a finding leaves the "
            "count when an operator resolves it).",
            labels=["kind"],
        )
        for kind in FINDING_KINDS:
            findings.add_metric([kind], sampled.findings.get(kind, 0))
        return [records, oldest, circuits, findings]

    def describe(self) -> Iterable[Metric]:
        return []


def exposition_registry(role: Role, *extra: Collector) -> CollectorRegistry:
    """The role's series from this process, or in multiprocess mode the sum over every
    process that shares the directory (a prefork worker's children, ``api --workers N``),
    plus ``extra`` collectors (the API's database gauges)."""
    source: Collector
    if multiprocess_mode():
        source = CollectorRegistry()
        multiprocess.MultiProcessCollector(source)  # type: ignore[no-untyped-call]
    else:
        source = REGISTRY
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RoleFilter(source, role))
    for collector in extra:
        registry.register(collector)
    return registry


def render(role: Role, *extra: Collector) -> tuple[bytes, str]:
    """The text exposition format and its content type (for ``GET /metrics``)."""
    return generate_latest(exposition_registry(role, *extra)), CONTENT_TYPE_LATEST


def start_metrics_server(port: int, host: str, role: Role, *extra: Collector) -> int:
    """Serve ``/metrics`` of ``role`` on ``host:port`` from a daemon thread of this process;
    the port it listens on (``port`` 0: one the system chose)."""
    server, _thread = start_http_server(port, addr=host, registry=exposition_registry(role, *extra))
    return int(server.server_port)
