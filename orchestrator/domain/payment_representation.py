"""The payment representation clients see, built in its one field order.

Every answer that carries a representation (a 202, a 200 replay, a GET, a stored final
response) is produced by ``encode_representation`` (``domain.encoding``): compact JSON,
UTF-8, keys in ONE order — the order of the dict built here, with ``metadata`` sorted by
key. The hazard this guards against: PostgreSQL's JSONB does not keep key order (it sorts
keys by length, then bytes), so a representation that round-trips through a JSONB column
comes back in another order, and a client comparing a replay with the first answer byte for
byte (or an ETag over the bytes) would see a change where there was none. Stored answers are
therefore kept as the encoded text (``accepted_response``, ``final_response``) and served
verbatim; a dict read back from JSONB is re-ordered with ``canonical_payment`` before it is
encoded.

Later representations (refunds, captures' payment bodies) follow the same rule: build the
dict in its documented field order and encode it with ``encode_representation``.
"""

from __future__ import annotations

from typing import Any

from orchestrator.domain.attempts import ATTEMPT_FIELDS, shown_attempts
from orchestrator.domain.encoding import iso, ordered
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.routing import PLATFORM_ACCOUNT
from orchestrator.domain.states import PaymentStatus

# The documented field order of a payment (docs/api/payments.md).
PAYMENT_FIELDS: tuple[str, ...] = (
    "id",
    "object",
    "status",
    "amount",
    "currency",
    "capture_method",
    "amount_capturable",
    "amount_captured",
    "amount_refunded",
    "payment_method",
    "customer_reference",
    "customer",
    "description",
    "metadata",
    "idempotency_key",
    "provider",
    "connector_account",
    "route",
    "route_attempts",
    "provider_payment_id",
    "failure",
    "next_action",
    "client_secret",
    "attempts",
    "created_at",
    "updated_at",
    "completed_at",
    "latest_event_sequence",
)
FAILURE_FIELDS: tuple[str, ...] = ("code", "decline_code", "message")


def canonical_payment(document: dict[str, Any]) -> dict[str, Any]:
    """A stored payment representation (read back from JSONB, in JSONB's key order) in the
    one order ``payment_representation`` builds."""
    result = ordered(document, PAYMENT_FIELDS)
    if isinstance(result.get("metadata"), dict):
        result["metadata"] = dict(sorted(result["metadata"].items()))
    if isinstance(result.get("failure"), dict):
        result["failure"] = ordered(result["failure"], FAILURE_FIELDS)
    if isinstance(result.get("route_attempts"), list):
        result["route_attempts"] = [
            _canonical_attempt(a) if isinstance(a, dict) else a for a in result["route_attempts"]
        ]
    return result


def _canonical_attempt(attempt: dict[str, Any]) -> dict[str, Any]:
    result = ordered(attempt, ATTEMPT_FIELDS)
    if isinstance(result.get("failure"), dict):
        result["failure"] = ordered(result["failure"], FAILURE_FIELDS)
    return result


def shown_status(record: PaymentRecord) -> str:
    """The status a client sees: a processing payment waiting for its customer is
    ``requires_action`` (see ``domain.states.PaymentStatus``)."""
    if record.requires_action:
        return PaymentStatus.REQUIRES_ACTION.value
    return record.status.value


def shown_route(record: PaymentRecord) -> tuple[str, ...]:
    """The stored route; a payment stored without one (before routing existed, or by the
    one-statement accept, which only claims for merchants without routing or a default
    account) ran on its one account."""
    if record.route:
        return record.route
    return (record.connector_account_id or PLATFORM_ACCOUNT,)


def payment_representation(record: PaymentRecord) -> dict[str, Any]:
    failure = None
    if record.failure is not None:
        failure = {
            "code": record.failure.code,
            "decline_code": record.failure.decline_code,
            "message": record.failure.message,
        }
    status = shown_status(record)
    return {
        "id": record.id,
        "object": "payment",
        "status": status,
        "amount": record.request.amount,
        "currency": record.request.currency,
        "capture_method": record.request.capture_method,
        # The money after the charge: what a capture may still take (requires_capture),
        # what was captured, and what refunds returned.
        "amount_capturable": record.amount_capturable,
        "amount_captured": record.amount_captured,
        "amount_refunded": record.amount_refunded,
        # null: only ``payment_methods`` was sent (one method per account).
        "payment_method": record.request.payment_method or None,
        "customer_reference": record.request.customer_reference,
        "customer": record.request.customer,
        "description": record.request.description,
        # Sorted: the request's order is the client's, the stored column's is JSONB's.
        "metadata": dict(sorted(record.request.metadata.items())),
        "idempotency_key": record.idempotency_key,
        "provider": record.provider,
        # The connector account it runs on (decision 0062); null: the platform's own
        # account.
        "connector_account": record.connector_account_id,
        # The accounts it may be tried on, in order (decision 0077).
        "route": list(shown_route(record)),
        # One per account tried, in order (decision 0086); the last is the current one.
        # ``attempts`` (below) is older and counts the worker runs (decision 0010).
        "route_attempts": shown_attempts(record, status),
        "provider_payment_id": record.provider_payment_id,
        "failure": failure,
        # Only while the customer must act (requires_action); null otherwise.
        "next_action": record.next_action if record.requires_action else None,
        "client_secret": record.client_secret if record.requires_action else None,
        "attempts": record.attempts,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "completed_at": iso(record.completed_at),
        # The newest merchant event this representation reflects (0: none yet); an event's
        # own ``data.object`` carries that event's sequence (``OutcomeRepository``).
        "latest_event_sequence": record.latest_event_sequence,
    }
