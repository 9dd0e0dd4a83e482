"""Records and audit rows as JSON-ready dicts: the ops API's bodies and the CLI's --json."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.domain.encoding import iso
from orchestrator.domain.model import AuditEntry, PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.domain.preconditions import lease_etag
from orchestrator.domain.states import RecoveryPoint
from orchestrator.ops.commands import OperatorAction


def lease_state(record: PaymentRecord | OperationRecord, now: datetime) -> str:
    """What the lease means, in words an operator acts on (a deferred record holds no
    worker: it is not "active")."""
    if record.status.is_final or record.recovery_point is RecoveryPoint.COMPLETED:
        return "finished"
    if record.locked_until is None:
        return "none"
    if record.lease_owner is None and record.next_attempt_at is not None:
        return "deferred" if record.next_attempt_at > now else "retry_due"
    return "active" if record.locked_until > now else "expired"


def lease_representation(record: PaymentRecord | OperationRecord, now: datetime) -> dict[str, Any]:
    """One lease: a payment's charge or an operation (``kind``; ``operation_id`` is the id
    takeover and retry take: the payment's id for its charge)."""
    if isinstance(record, OperationRecord):
        return _operation_lease(record, now)
    expired = None if record.locked_until is None else record.locked_until <= now
    return {
        "kind": "charge",
        "operation_id": record.id,
        "payment_id": record.id,
        "client_id": record.client_id,
        "status": record.status.value,
        "recovery_point": record.recovery_point.value,
        "lease_owner": record.lease_owner,
        "lease_token": record.lease_token,
        "locked_until": iso(record.locked_until),
        "lease_expired": expired,
        "lease_state": lease_state(record, now),
        "next_attempt_at": iso(record.next_attempt_at),
        "attempts": record.attempts,
        "unknown_outcomes": record.unknown_outcomes,
        "last_error": record.last_error,
        "amount": record.request.amount,
        "currency": record.request.currency,
        "provider_payment_id": record.provider_payment_id,
        "lookup_pending": record.lookup_pending,
        "lookup_pages": record.lookup_pages,
        "rejected_intents": [dict(r) for r in record.rejected_intents],
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        # Send it back as If-Match with a takeover or retry: refused (412) if the lease
        # changed since this was read.
        "etag": lease_etag(record),
    }


def _operation_lease(record: OperationRecord, now: datetime) -> dict[str, Any]:
    expired = None if record.locked_until is None else record.locked_until <= now
    return {
        "kind": record.kind.value,
        "operation_id": record.id,
        "payment_id": record.payment_id,
        "client_id": record.client_id,
        "status": record.status.value,
        "recovery_point": record.recovery_point.value,
        "lease_owner": record.lease_owner,
        "lease_token": record.lease_token,
        "locked_until": iso(record.locked_until),
        "lease_expired": expired,
        "lease_state": lease_state(record, now),
        "next_attempt_at": iso(record.next_attempt_at),
        "attempts": record.attempts,
        "unknown_outcomes": record.unknown_outcomes,
        "last_error": record.last_error,
        "amount": record.amount,
        "currency": record.currency,
        "provider_payment_id": None,
        "provider_object_id": record.provider_object_id,
        "lookup_pending": record.lookup_pending,
        "lookup_pages": 0,
        "rejected_intents": [],
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "etag": lease_etag(record),
    }


def audit_representation(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "created_at": iso(entry.created_at),
        "actor_client_id": entry.actor_client_id,
        "actor_name": entry.actor_name,
        "action": entry.action,
        "payment_id": entry.payment_id,
        "operation_id": entry.operation_id,
        "reason": entry.reason,
        "old_token": entry.old_token,
        "new_token": entry.new_token,
    }


def action_representation(action: OperatorAction) -> dict[str, Any]:
    return {
        "payment_id": action.payment_id,
        "action": action.action,
        "status": action.record.status.value,
        "old_token": action.old_token,
        "new_token": action.new_token,
        "published": action.published,
        "audit": audit_representation(action.audit),
        "lease": lease_representation(action.record, action.now),
    }
