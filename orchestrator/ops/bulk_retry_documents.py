"""A bulk retry's summary as a JSON-ready dict: the ops API's body and the CLI's --json."""

from __future__ import annotations

from typing import Any

from orchestrator.domain.encoding import iso
from orchestrator.ops.bulk_retry import BulkRetryItem, BulkRetrySummary


def bulk_retry_representation(summary: BulkRetrySummary) -> dict[str, Any]:
    filters = summary.filters
    return {
        "object": "bulk_retry",
        "dry_run": summary.dry_run,
        "status": filters.status,
        "since": iso(filters.since),
        "connector_account": filters.connector,
        "matched": summary.matched,
        "retried": summary.retried,
        "would_retry": summary.would_retry,
        "skipped": sum(summary.skipped.values()),
        "skipped_because": summary.skipped,
        "not_published": summary.not_published,
        "more": summary.more,
        "data": [bulk_item_representation(item) for item in summary.items],
    }


def bulk_item_representation(item: BulkRetryItem) -> dict[str, Any]:
    action = item.action
    return {
        "payment_id": item.payment_id,
        "connector_account": item.connector,
        "parked_at": iso(item.parked_at),
        "last_error": item.last_error,
        "result": item.result.value,
        "skipped_because": None if item.skip_reason is None else item.skip_reason.value,
        "old_token": item.lease_token,
        "new_token": None if action is None else action.new_token,
        "published": None if action is None else action.published,
        "audit_id": None if action is None else action.audit.id,
    }
