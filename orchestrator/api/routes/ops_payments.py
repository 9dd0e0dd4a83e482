"""``/v1/ops``: what an operator reads about payments (keys with the ``ops`` role).

* ``GET /v1/ops/payments/{id}``: one payment with everything that happened to it;
* ``GET /v1/ops/payments``: every client's payments, filtered, newest first, by cursor;
* ``GET /v1/ops/status``: what is stuck, at a glance.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from orchestrator.api.deps import ContainerDep, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.ops_leases import AuditOut, LeaseOut
from orchestrator.api.schemas import PaymentOut
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.ops.errors import InvalidCursor
from orchestrator.ops.payment_documents import (
    payment_detail_representation,
    payment_page_representation,
    status_representation,
)
from orchestrator.ops.payment_reads import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    get_payment_detail,
    list_payments,
)
from orchestrator.ops.status import get_status

router = APIRouter(prefix="/v1/ops", tags=["ops"])

_Text = Annotated[str | None, Query(min_length=1, max_length=255)]


class OpsPaymentOut(PaymentOut):
    client_id: str = Field(description="The merchant API client that owns the payment.")
    recovery_point: Literal["accepted", "intent_created", "provider_settled", "completed"]


class OperationOut(BaseModel):
    kind: Literal["charge", "capture", "cancel", "refund", "refund_sync"]
    operation_id: str | None = Field(
        default=None,
        description="An operation after the charge (rfd_…): takeover and retry take it.",
    )
    status: str
    recovery_point: str
    lease_state: Literal["active", "expired", "deferred", "retry_due", "none", "finished"] = Field(
        description="'deferred': a long backoff waits in the row; no worker holds it."
    )
    lease_owner: str | None
    lease_token: int
    locked_until: str | None
    next_attempt_at: str | None
    attempts: int
    unknown_outcomes: int
    confirm_attempts: int
    provider_payment_id: str | None
    provider_charge_id: str | None
    provider_outcome: str | None
    last_error: str | None
    waiting_for: Literal["customer", "provider"] | None = Field(
        default=None,
        description="A waiting operation (no lease held; re-checked at next_attempt_at): "
        "'customer' while 3-D Secure is pending (requires_action), 'provider' while an "
        "asynchronous method is processing.",
    )
    waiting_since: str | None = Field(
        default=None, description="When the wait began (the authentication timeout counts from it)."
    )
    amount: int | None = Field(default=None, description="A refund's amount.")
    provider_object_id: str | None = Field(
        default=None, description="A refund's provider object (re_…)."
    )


class ProviderCallOut(BaseModel):
    id: int
    created_at: str
    # The operation labels of orchestrator.providers.observed.
    operation: Literal[
        "create",
        "confirm",
        "retrieve",
        "lookup",
        "capture",
        "cancel",
        "refund",
        "retrieve_refund",
        "list_refunds",
    ]
    method: str
    path: str
    idempotency_key: str | None
    outcome: Literal["ok", "declined", "permanent", "retryable", "unknown", "error"]
    http_status: int | None
    provider_object_id: str | None
    provider_status: str | None
    error: str | None
    latency_ms: int


class ProviderEventOut(BaseModel):
    id: str = Field(description="The provider's event id (evt_…).")
    type: str
    provider_created: int = Field(description="When the provider made it (its clock, unix s).")
    received_at: str
    object_type: str
    object_id: str
    woke_payment: bool = Field(description="Receiving it made the deferred payment due.")


class LeaseEventOut(BaseModel):
    id: int
    created_at: str
    event: Literal["claim", "takeover", "defer", "park", "retry", "finish"]
    owner: str | None
    lease_token: int
    locked_until: str | None
    status: str
    recovery_point: str


class EventDeliveryOut(BaseModel):
    endpoint_url: str
    status: str = Field(description="pending, delivered or failed (given up)")
    attempts: int


class EventOut(BaseModel):
    id: int
    event_id: str = Field(description="evt_…: GET /v1/ops/events/{event_id}/deliveries.")
    type: str
    sequence: int
    created_at: str
    published_at: str | None = Field(description="When the relay fanned it out.")
    deliveries: list[EventDeliveryOut]


class DisputeOut(BaseModel):
    id: str = Field(description="The provider's dispute id (dp_…).")
    object: Literal["dispute"]
    payment_id: str
    provider_payment_id: str | None
    amount: int
    currency: str
    reason: str | None
    status: str = Field(description="The provider's dispute status (needs_response, won, …).")
    created_at: str | None
    updated_at: str | None


class LedgerLineOut(BaseModel):
    id: int
    account: str
    amount: int
    currency: str
    created_at: str


class PaymentDetailOut(BaseModel):
    payment: OpsPaymentOut
    now: str = Field(description="The database clock the lease was judged by.")
    operations: list[OperationOut]
    lease: LeaseOut
    provider_calls: list[ProviderCallOut]
    provider_events: list[ProviderEventOut] = Field(
        description="The provider's webhooks about this payment, oldest first (hints only)."
    )
    lease_history: list[LeaseEventOut]
    audit: list[AuditOut]
    events: list[EventOut]
    ledger: list[LedgerLineOut]
    disputes: list[DisputeOut] = Field(
        default_factory=list,
        description="Disputes the provider reported about this payment, oldest first.",
    )


class OpsPaymentList(BaseModel):
    data: list[OpsPaymentOut]
    has_more: bool
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class LeaseCountsOut(BaseModel):
    active: int
    expired: int
    deferred: int
    retry_due: int


class StatusOut(BaseModel):
    now: str
    healthy: bool = Field(description="No needs_attention payment and no expired lease.")
    payments_by_status: dict[str, int]
    oldest_processing_age_seconds: float | None
    needs_attention: int
    leases: LeaseCountsOut
    requires_action_past_half_timeout: int = Field(
        description="Payments waiting for their customer (requires_action) for more than "
        "half of ACTION_TIMEOUT_SECONDS: the ones about to end canceled / "
        "authentication_timeout."
    )
    webhook_backlog: int = Field(
        description="Webhook deliveries pending to enabled endpoints (the relay's queue)."
    )
    oldest_undelivered_webhook_age_seconds: float | None = Field(
        description="Age of the oldest pending delivery; null when none."
    )
    disabled_webhook_endpoints: int = Field(
        description="Endpoints disabled (410, failing for the whole retry window, or by hand)."
    )


@router.get(
    "/payments/{payment_id}",
    summary="One payment with its operations, provider calls, lease history, audit, events",
    response_model=PaymentDetailOut,
    responses={404: problem("No such payment"), **AUTH_ERRORS},
)
def get_ops_payment(container: ContainerDep, _client: OpsClient, payment_id: str) -> JSONResponse:
    detail = (
        get_payment_detail(container.read_only_uow, payment_id)
        if is_payment_id(payment_id)
        else None
    )
    if detail is None:
        raise Problem(404, "not-found", "No such payment exists.")
    return JSONResponse(payment_detail_representation(detail))


@router.get(
    "/payments",
    summary="Every client's payments, newest first, filtered, by cursor",
    response_model=OpsPaymentList,
    responses={400: problem("A filter, the limit or the cursor is invalid"), **AUTH_ERRORS},
)
def get_ops_payments(
    container: ContainerDep,
    _client: OpsClient,
    status: PaymentStatus | None = None,
    client_id: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    customer_reference: _Text = None,
    idempotency_key: _Text = None,
    created_after: Annotated[
        datetime | None, Query(description="Inclusive; ISO 8601 with a time zone.")
    ] = None,
    created_before: Annotated[
        datetime | None, Query(description="Exclusive; ISO 8601 with a time zone.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[
        str | None, Query(min_length=1, max_length=500, description="`next_cursor` of a page.")
    ] = None,
) -> JSONResponse:
    for name, value in (("created_after", created_after), ("created_before", created_before)):
        if value is not None and value.tzinfo is None:
            raise Problem(
                400,
                "invalid-request",
                f"{name} needs a time zone (e.g. 2026-12-01T09:00:00Z).",
                errors=[{"field": f"query.{name}", "message": "time zone missing"}],
            )
    filters = PaymentFilters(
        status=status,
        client_id=client_id,
        customer_reference=customer_reference,
        idempotency_key=idempotency_key,
        created_after=created_after,
        created_before=created_before,
    )
    try:
        page = list_payments(container.read_only_uow, filters, limit=limit, cursor=cursor)
    except InvalidCursor as error:
        raise Problem(400, "invalid-request", error.message) from None
    return JSONResponse(payment_page_representation(page))


@router.get(
    "/status",
    summary="What is stuck, at a glance",
    response_model=StatusOut,
    responses=AUTH_ERRORS,
)
def get_ops_status(container: ContainerDep, _client: OpsClient) -> JSONResponse:
    return JSONResponse(
        status_representation(get_status(container.read_only_uow, container.settings))
    )
