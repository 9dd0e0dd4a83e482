"""Plain records of the webhook tables (repositories return these, never rows), for the
webhook relay (``orchestrator.events``), ops and the API."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class EndpointStatus(StrEnum):
    ENABLED = "enabled"
    DISABLED = "disabled"


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up: the retry window ran out, or the endpoint answered 410


class AttemptOutcome(StrEnum):
    DELIVERED = "delivered"  # 2xx
    GONE = "gone"  # 410: the endpoint is disabled
    HTTP_ERROR = "http_error"  # any other status, redirects included (never followed)
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    REFUSED_TARGET = "refused_target"  # the URL resolved to an address we may not call
    ERROR = "error"


ATTEMPT_OUTCOMES = tuple(o.value for o in AttemptOutcome)


@dataclass(frozen=True)
class WebhookEndpoint:
    id: str
    client_id: str
    url: str
    events: list[str]
    description: str | None
    status: EndpointStatus
    disabled_reason: str | None
    secret_encrypted: str
    previous_secret_encrypted: str | None
    previous_secret_expires_at: datetime | None
    version: int
    failing_since: datetime | None
    created_at: datetime
    updated_at: datetime
    rotated_at: datetime | None

    @property
    def etag(self) -> str:
        return f'"{self.version}"'


@dataclass(frozen=True)
class Event:
    id: int  # internal row id (ordering)
    public_id: str
    payment_id: str
    client_id: str
    event_type: str
    sequence: int
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class Delivery:
    id: int
    event_id: int
    endpoint_id: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    window_started_at: datetime
    lease_owner: str | None
    lease_token: int
    locked_until: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True)
class DeliveryAttempt:
    id: int
    delivery_id: int
    attempt: int
    relay: str
    lease_token: int
    outcome: AttemptOutcome
    status_code: int | None
    latency_ms: int
    response_body: str | None
    error: str | None
    started_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery a relay holds the lease of, with what it needs to attempt it."""

    delivery: Delivery
    event: Event
    endpoint: WebhookEndpoint
    claimed_at: datetime  # the database clock at the claim (secret grace periods)


@dataclass(frozen=True)
class WebhookStats:
    backlog: int  # pending deliveries to enabled endpoints
    oldest_pending_created_at: datetime | None
    disabled_endpoints: int
