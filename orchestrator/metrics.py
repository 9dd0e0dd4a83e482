"""Prometheus metrics.  Defined once here; the API serves them on ``/metrics``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
RECORDS_BY_STATUS = Gauge(
    "payorch_payment_records", "Payment records by status (sampled at scrape).", ["status"]
)
OLDEST_PROCESSING_AGE = Gauge(
    "payorch_oldest_processing_age_seconds",
    "Age of the oldest payment still processing (sampled at scrape); 0 when none.",
)
RETENTION_PURGED = Counter(
    "payorch_idempotency_keys_purged_total", "Idempotency keys purged by retention."
)
