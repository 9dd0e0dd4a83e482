"""A payment's detail, a page of payments and the status overview as JSON-ready dicts: the
ops API's bodies and the CLI's --json."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.db.repositories.provider_events import StoredProviderEvent
from orchestrator.domain.attempts import EndedAttempt
from orchestrator.domain.encoding import iso
from orchestrator.domain.history import LeaseEvent, OutboxEvent, PostedLedgerLine, ProviderCall
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.ops.circuits import circuit_document
from orchestrator.ops.failover_rate import failover_rate_document
from orchestrator.ops.lease_documents import (
    audit_representation,
    lease_representation,
    lease_state,
)
from orchestrator.ops.payment_reads import PaymentDetail, PaymentPage
from orchestrator.ops.reconciliation import reconciliation_status_document
from orchestrator.ops.status import OpsStatus
from orchestrator.services.disputes import dispute_representation


def payment_summary(record: PaymentRecord) -> dict[str, Any]:
    return {
        **payment_representation(record),
        "client_id": record.client_id,
        "recovery_point": record.recovery_point.value,
        # How the route was chosen (decision 0077): the rule (null: the default route or a
        # pinned account) and the accounts skipped at accept, with why.
        "route_rule": record.route_rule,
        "route_skipped": [dict(skip) for skip in record.route_skipped],
    }


def charge_operation(record: PaymentRecord, now: datetime) -> dict[str, Any]:
    """The payment's one operation so far (the charge), with its lease."""
    return {
        "kind": "charge",
        "status": record.status.value,
        "recovery_point": record.recovery_point.value,
        "lease_state": lease_state(record, now),
        "lease_owner": record.lease_owner,
        "lease_token": record.lease_token,
        "locked_until": iso(record.locked_until),
        "next_attempt_at": iso(record.next_attempt_at),
        "attempts": record.attempts,
        "unknown_outcomes": record.unknown_outcomes,
        "confirm_attempts": record.confirm_attempts,
        "provider_payment_id": record.provider_payment_id,
        "provider_charge_id": record.provider_charge_id,
        "provider_outcome": record.provider_outcome.value if record.provider_outcome else None,
        "last_error": record.last_error,
        # A waiting operation holds no lease: whom it waits for, since when; its re-check
        # is next_attempt_at.
        "waiting_for": record.waiting_for.value if record.waiting_for else None,
        "waiting_since": iso(record.waiting_since),
        # The customer's authentication results forwarded through us (decision 0073).
        "action_result_attempts": record.action_result_attempts,
        "action_result_pending": record.action_result_pending,
    }


def later_operation(record: OperationRecord, now: datetime) -> dict[str, Any]:
    """An operation after the charge (a capture, cancel or refund), with its own lease."""
    return {
        "kind": record.kind.value,
        "operation_id": record.id,
        "status": record.status.value,
        "recovery_point": record.recovery_point.value,
        "lease_state": lease_state(record, now),
        "lease_owner": record.lease_owner,
        "lease_token": record.lease_token,
        "locked_until": iso(record.locked_until),
        "next_attempt_at": iso(record.next_attempt_at),
        "attempts": record.attempts,
        "unknown_outcomes": record.unknown_outcomes,
        "confirm_attempts": record.step_attempts,
        "provider_payment_id": None,
        "provider_charge_id": None,
        "provider_outcome": record.provider_outcome,
        "last_error": record.last_error,
        "amount": record.amount,
        "provider_object_id": record.provider_object_id,
        # Why a finished operation failed (a refused capture: the provider's code/message).
        "failure_code": record.failure_code,
        "failure_message": record.failure_message,
    }


def provider_call_representation(call: ProviderCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "created_at": iso(call.created_at),
        "operation": call.operation,
        "method": call.method,
        "path": call.path,
        "idempotency_key": call.idempotency_key,
        "outcome": call.outcome,
        "http_status": call.http_status,
        "provider_object_id": call.provider_object_id,
        "provider_status": call.provider_status,
        "error": call.error,
        "latency_ms": call.latency_ms,
    }


def provider_event_representation(event: StoredProviderEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "type": event.type,
        "provider_created": event.provider_created,
        "received_at": iso(event.received_at),
        "object_type": event.object_type,
        "object_id": event.object_id,
        "woke_payment": event.woke_payment,
    }


def lease_event_representation(event: LeaseEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "created_at": iso(event.created_at),
        "event": event.event,
        "owner": event.owner,
        "lease_token": event.lease_token,
        "locked_until": iso(event.locked_until),
        "status": event.status,
        "recovery_point": event.recovery_point,
    }


def outbox_event_representation(event: OutboxEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "event_id": event.public_id,
        "type": event.event_type,
        "sequence": event.sequence,
        "created_at": iso(event.created_at),
        "published_at": iso(event.published_at),
        "deliveries": [
            {"endpoint_url": url, "status": status, "attempts": attempts}
            for url, status, attempts in event.deliveries
        ],
    }


def ledger_line_representation(line: PostedLedgerLine) -> dict[str, Any]:
    return {
        "id": line.id,
        "account": line.account,
        "amount": line.amount,
        "currency": line.currency,
        "created_at": iso(line.created_at),
    }


def payment_detail_representation(detail: PaymentDetail) -> dict[str, Any]:
    record = detail.record
    return {
        "payment": payment_summary(record),
        "now": iso(detail.now),
        "operations": [
            charge_operation(record, detail.now),
            *(later_operation(op, detail.now) for op in detail.operations),
        ],
        "lease": lease_representation(record, detail.now),
        "provider_calls": [provider_call_representation(c) for c in detail.provider_calls],
        "provider_events": [provider_event_representation(e) for e in detail.provider_events],
        "disputes": [dispute_representation(d) for d in detail.disputes],
        "lease_history": [lease_event_representation(e) for e in detail.lease_events],
        "audit": [audit_representation(a) for a in detail.audit],
        "events": [outbox_event_representation(e) for e in detail.events],
        "ledger": [ledger_line_representation(line) for line in detail.ledger],
        "attempts": [ended_attempt_representation(a) for a in detail.attempts],
    }


def ended_attempt_representation(attempt: EndedAttempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "connector_account": attempt.connector_account,
        "provider": attempt.provider,
        "provider_payment_id": attempt.provider_payment_id,
        "status": attempt.status,
        "failure": attempt.failure,
        "reason": attempt.reason,
        "proof": attempt.proof,
        "next_connector_account": attempt.next_connector_account,
        "started_at": iso(attempt.started_at),
        "ended_at": iso(attempt.ended_at),
    }


def payment_page_representation(page: PaymentPage) -> dict[str, Any]:
    return {
        "data": [payment_summary(r) for r in page.records],
        "has_more": page.next_cursor is not None,
        "next_cursor": page.next_cursor,
    }


def status_representation(status: OpsStatus) -> dict[str, Any]:
    age = status.oldest_processing_age_seconds
    webhook_age = status.oldest_undelivered_webhook_age_seconds
    return {
        "now": iso(status.now),
        "healthy": status.healthy,
        "payments_by_status": status.by_status,
        "oldest_processing_age_seconds": None if age is None else round(age, 3),
        "needs_attention": status.needs_attention,
        "leases": {
            "active": status.leases.active,
            "expired": status.leases.expired,
            "deferred": status.leases.deferred,
            "retry_due": status.leases.due_retries,
        },
        "requires_action_past_half_timeout": status.requires_action_past_half_timeout,
        "webhook_backlog": status.webhooks.backlog,
        "oldest_undelivered_webhook_age_seconds": (
            None if webhook_age is None else round(webhook_age, 3)
        ),
        "disabled_webhook_endpoints": status.webhooks.disabled_endpoints,
        "connectors": [circuit_document(view) for view in status.circuits],
        "reconciliation": (
            reconciliation_status_document(status.reconciliation)
            if status.reconciliation is not None
            else None
        ),
        "failover": (
            failover_rate_document(status.failover) if status.failover is not None else None
        ),
    }
