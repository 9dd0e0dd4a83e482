"""What happened to a payment, as plain records: provider calls, lease history, outbox
events, ledger lines.  The operator's payment page is built from these."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ProviderCallRecord:
    """One provider call as the worker made it, before it is stored."""

    operation: str  # create, confirm, retrieve, capture, cancel, refund, retrieve_refund, …
    method: str
    path: str  # the provider request it stands for, e.g. the provider API's confirm path
    payment_id: str | None
    idempotency_key: str | None
    outcome: str  # ok, declined, permanent, retryable, unknown, error
    http_status: int | None
    provider_object_id: str | None
    provider_status: str | None
    error: str | None
    latency_ms: int


@dataclass(frozen=True)
class ProviderCall:
    id: int
    payment_id: str | None
    operation: str
    method: str
    path: str
    idempotency_key: str | None
    outcome: str
    http_status: int | None
    provider_object_id: str | None
    provider_status: str | None
    error: str | None
    latency_ms: int
    created_at: datetime


@dataclass(frozen=True)
class LeaseEvent:
    id: int
    payment_id: str
    event: str  # claim, takeover, defer, park, retry, finish
    owner: str | None
    lease_token: int
    locked_until: datetime | None
    status: str
    recovery_point: str
    created_at: datetime
    # The operation whose lease this is (a refund's rfd_…); None: the payment's charge.
    operation_id: str | None = None


@dataclass(frozen=True)
class OutboxEvent:
    id: int
    payment_id: str
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    published_at: datetime | None  # fanned out to webhook deliveries by the relay
    public_id: str = ""  # evt_…: what merchants and webhook-id headers name
    sequence: int = 0  # per payment
    # Webhook deliveries of this event: (endpoint url, status, attempts), filled by the
    # operator's payment detail.
    deliveries: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class PostedLedgerLine:
    id: int
    account: str
    amount: int
    currency: str
    created_at: datetime
