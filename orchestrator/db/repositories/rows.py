"""Row -> dataclass mapping shared by the repositories."""

from __future__ import annotations

from orchestrator.db.session import Row
from orchestrator.domain.model import (
    ApiClient,
    AuditEntry,
    Failure,
    PaymentRecord,
    PaymentRequest,
    Role,
)
from orchestrator.domain.states import Outcome, PaymentStatus, RecoveryPoint, WaitingFor


def to_payment(m: Row) -> PaymentRecord:
    failure = None
    if m["failure_code"] is not None:
        failure = Failure(
            code=m["failure_code"],
            message=m["failure_message"] or "",
            decline_code=m["decline_code"],
        )
    return PaymentRecord(
        id=m["id"],
        client_id=m["client_id"],
        idempotency_key=m["idempotency_key"],
        request_fingerprint=m["request_fingerprint"],
        request=PaymentRequest(
            amount=m["amount"],
            currency=m["currency"],
            payment_method=m["payment_method"],
            customer_reference=m["customer_reference"],
            description=m["description"],
            metadata=dict(m["metadata"] or {}),
            customer=m.get("customer"),
            off_session=m.get("off_session"),
            return_url=m.get("return_url"),
            capture_method=m.get("capture_method") or "automatic",
            payment_methods=dict(m.get("payment_methods") or {}),
        ),
        connector_account_id=m.get("connector_account_id"),
        route=tuple(m.get("route") or ()),
        route_rule=m.get("route_rule"),
        route_skipped=tuple(m.get("route_skipped") or ()),
        failovers=m.get("failovers") or 0,
        route_attempts=tuple(m.get("route_attempts") or ()),
        status=PaymentStatus(m["status"]),
        recovery_point=RecoveryPoint(m["recovery_point"]),
        lease_token=m["lease_token"],
        lease_owner=m["lease_owner"],
        locked_until=m["locked_until"],
        next_attempt_at=m["next_attempt_at"],
        attempts=m["attempts"],
        unknown_outcomes=m["unknown_outcomes"],
        confirm_attempts=m["confirm_attempts"],
        provider=m["provider"],
        provider_payment_id=m["provider_payment_id"],
        provider_charge_id=m["provider_charge_id"],
        provider_outcome=Outcome(m["provider_outcome"]) if m["provider_outcome"] else None,
        failure=failure,
        last_error=m["last_error"],
        response_body=m["response_body"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        completed_at=m["completed_at"],
        first_create_at=m["first_create_at"],
        last_create_at=m["last_create_at"],
        lookup_pending=bool(m["lookup_pending"]),
        lookup_cursor=m["lookup_cursor"],
        lookup_pages=m["lookup_pages"],
        rejected_intents=tuple(m["rejected_intents"] or ()),
        settled_amount=m["settled_amount"],
        settled_currency=m["settled_currency"],
        accepted_response=_utf8(m.get("accepted_response")),
        final_response=_utf8(m.get("final_response")),
        waiting_for=WaitingFor(m["waiting_for"]) if m.get("waiting_for") else None,
        waiting_since=m.get("waiting_since"),
        next_action=m.get("next_action"),
        client_secret=m.get("client_secret"),
        woken_at=m.get("woken_at"),
        amount_captured=m.get("amount_captured") or 0,
        amount_refund_reserved=m.get("amount_refund_reserved") or 0,
        amount_refunded=m.get("amount_refunded") or 0,
        latest_event_sequence=m.get("latest_event_sequence") or 0,
        amount_capturable=m.get("amount_capturable") or 0,
        action_result=m.get("action_result"),
        action_result_attempts=m.get("action_result_attempts") or 0,
        action_result_pending=bool(m.get("action_result_pending")),
    )


def _utf8(text: str | None) -> bytes | None:
    # Stored as text (valid JSON is valid UTF-8); served as the very same bytes.
    return None if text is None else text.encode("utf-8")


def to_client(m: Row) -> ApiClient:
    return ApiClient(
        id=m["id"],
        name=m["name"],
        role=Role(m["role"]),
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
        default_connector_account_id=m.get("default_connector_account_id"),
        routing_version=m.get("routing_version"),
    )


def to_audit(m: Row) -> AuditEntry:
    return AuditEntry(
        id=m["id"],
        actor_client_id=m["actor_client_id"],
        actor_name=m["actor_name"],
        action=m["action"],
        payment_id=m["payment_id"],
        reason=m["reason"],
        old_token=m["old_token"],
        new_token=m["new_token"],
        created_at=m["created_at"],
        operation_id=m.get("operation_id"),
    )
