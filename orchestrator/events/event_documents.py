"""Events, endpoints and deliveries as JSON documents (API, ops, console, webhook bodies)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.db.repositories.deliveries import DeliveryView
from orchestrator.domain.encoding import iso
from orchestrator.domain.webhooks import DeliveryAttempt, Event, WebhookEndpoint


def event_document(event: Event) -> dict[str, Any]:
    """The body of a webhook and an item of ``GET /v1/events``."""
    return {
        "id": event.public_id,
        "type": event.event_type,
        "created_at": iso(event.created_at),
        "sequence": event.sequence,
        "data": {"object": event.payload},
    }


def event_body(event: Event) -> str:
    """The exact text posted and signed.  The same event gives the same text on every
    attempt (the stored payload reads back in one order), compact, ASCII-only."""
    return json.dumps(event_document(event), separators=(",", ":"))


def endpoint_document(endpoint: WebhookEndpoint, *, secret: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "url": endpoint.url,
        "events": endpoint.events,
        "description": endpoint.description,
        "status": endpoint.status.value,
        "disabled_reason": endpoint.disabled_reason,
        "created_at": iso(endpoint.created_at),
        "updated_at": iso(endpoint.updated_at),
        "secret_rotated_at": iso(endpoint.rotated_at),
        "etag": endpoint.etag,
    }
    if secret is not None:
        doc["secret"] = secret
    return doc


def attempt_document(attempt: DeliveryAttempt) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "relay": attempt.relay,
        "outcome": attempt.outcome.value,
        "status_code": attempt.status_code,
        "latency_ms": attempt.latency_ms,
        "response_body": attempt.response_body,
        "error": attempt.error,
        "started_at": iso(attempt.started_at),
        "recorded_at": iso(attempt.created_at),
    }


def delivery_document(view: DeliveryView) -> dict[str, Any]:
    delivery = view.delivery
    return {
        "id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "endpoint_url": view.endpoint_url,
        "status": delivery.status.value,
        "attempts": delivery.attempts,
        "next_attempt_at": iso(delivery.next_attempt_at),
        "window_started_at": iso(delivery.window_started_at),
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "lease_owner": delivery.lease_owner,
        "locked_until": iso(delivery.locked_until),
        "created_at": iso(delivery.created_at),
        "delivered_at": iso(delivery.delivered_at),
        "attempt_log": [attempt_document(a) for a in view.attempts],
    }
