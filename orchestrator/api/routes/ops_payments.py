"""``/v1/ops``: what an operator reads about payments (keys with the ``ops`` role).

* ``GET /v1/ops/payments/{id}``: one payment with everything that happened to it;
* ``GET /v1/ops/payments``: every client's payments, filtered, newest first, by cursor;
* ``GET /v1/ops/status``: what is stuck, at a glance.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from orchestrator.api.deps import ContainerDep, OpsClient
from orchestrator.api.path_ids import PAYMENT_ID_SEGMENT
from orchestrator.api.problems import Problem
from orchestrator.api.query_parameters import ISO_TIME_SCHEMA, time_parameter
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.ops_circuits import ConnectorCircuitOut
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
    route_rule: str | None = Field(
        default=None,
        description="The routing rule that chose the route; null: the default route, or a "
        "pinned account.",
    )
    route_skipped: list[dict[str, str]] = Field(
        default_factory=list,
        description="Accounts of the rule's route left out at accept, with why "
        '(`{"connector_account", "reason"}`: `disabled`, `no_payment_method`).',
    )


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
    waiting_for: Literal["customer", "provider", "circuit"] | None = Field(
        default=None,
        description="A waiting operation (no lease held; re-checked at next_attempt_at): "
        "'customer' while 3-D Secure is pending (requires_action), 'provider' while an "
        "asynchronous method is processing, 'circuit' while its connector account's "
        "circuit is open (released by the sweeper when it lets calls through).",
    )
    waiting_since: str | None = Field(
        default=None, description="When the wait began (the authentication timeout counts from it)."
    )
    action_result_attempts: int | None = Field(
        default=None,
        description="The charge: how many customer's authentication results were sent to "
        "POST /v1/payments/{id}/details (the last one is forwarded with the key "
        "payorch-{id}-details-{n}).",
    )
    action_result_pending: bool | None = Field(
        default=None,
        description="The charge: the last result waits to be forwarded (or for the "
        "provider's answer to it).",
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
        "details",
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
    event: Literal["claim", "takeover", "defer", "park", "retry", "wait", "finish", "failover"]
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


class EndedAttemptOut(BaseModel):
    """An attempt that ended in a failover, with the proof recorded with the move."""

    number: int = Field(description="1 for the route's first account, then 2, …")
    connector_account: str
    provider: str
    provider_payment_id: str | None
    status: Literal["failed"]
    failure: dict[str, Any] | None
    reason: Literal["provider_decline", "circuit_open"]
    proof: str = Field(
        description="What proved this account moved no money, recorded in the transaction "
        "that moved the payment to `next_connector_account`."
    )
    next_connector_account: str
    started_at: str
    ended_at: str


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
    attempts: list[EndedAttemptOut] = Field(
        default_factory=list,
        description="The attempts that ended in a failover, oldest first, each with its "
        "proof; the attempt in progress (or the last) is `payment.route_attempts`' last.",
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


class ReconciliationStatusOut(BaseModel):
    last_run_id: str | None = Field(description="The last completed reconciliation run.")
    last_run_age_seconds: float | None = Field(
        description="How long ago it finished; null when no run ever completed."
    )
    open_findings: int = Field(description="Findings no operator has resolved yet.")
    open_findings_by_kind: dict[str, int]


class FailoverCountOut(BaseModel):
    connector_account: str = Field(description="The account the failovers left.")
    reason: str = Field(description="Why: provider_decline or circuit_open.")
    failovers: int


class FailoverRateOut(BaseModel):
    window_seconds: int = Field(description="The window counted back from `now` (an hour).")
    payments_finished: int = Field(
        description="Payments that reached a final status in the window (completed_at)."
    )
    failovers: int = Field(description="Attempts that ended in a failover in the window.")
    attempts_ended: int = Field(
        description="payments_finished + failovers: every attempt that ended in the window."
    )
    failover_rate: float = Field(
        description="failovers / attempts_ended (0 when no attempt ended), as the metrics "
        "payorch_failovers_total / payorch_route_attempts_total; 4 decimals."
    )
    top_failovers: list[FailoverCountOut] = Field(
        description="The five largest (connector account, reason) pairs, most first."
    )


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
    connectors: list[ConnectorCircuitOut] = Field(
        default_factory=list,
        description="Connector accounts' circuits: every account whose provider failed at "
        "least once, and every account with payments waiting out its circuit (the "
        "platform's own account is ca_platform_stripe). An account not listed has a "
        "closed circuit.",
    )
    reconciliation: ReconciliationStatusOut | None = Field(
        default=None,
        description="The last completed reconciliation run's age and the open findings.",
    )
    failover: FailoverRateOut | None = Field(
        default=None,
        description="The last hour's payments finished, failovers and failover rate, with "
        "the failovers by connector account and reason.",
    )


@router.get(
    f"/payments/{PAYMENT_ID_SEGMENT}",
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
        str | None,
        Query(
            description="Inclusive; ISO 8601 with a time zone.",
            json_schema_extra=ISO_TIME_SCHEMA,
        ),
    ] = None,
    created_before: Annotated[
        str | None,
        Query(
            description="Exclusive; ISO 8601 with a time zone.",
            json_schema_extra=ISO_TIME_SCHEMA,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[
        str | None, Query(min_length=1, max_length=500, description="`next_cursor` of a page.")
    ] = None,
) -> JSONResponse:
    filters = PaymentFilters(
        status=status,
        client_id=client_id,
        customer_reference=customer_reference,
        idempotency_key=idempotency_key,
        created_after=time_parameter("created_after", created_after),
        created_before=time_parameter("created_before", created_before),
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
