"""``POST /v1/ops/payments/retry``: retry parked payments in bulk (``ops.bulk_retry``;
decision 0088), the twin of ``payorch payments retry --status needs_attention …``.

Each payment goes through the single retry (``POST /v1/ops/payments/{id}/retry``'s own
function), audited under the calling ops client, one audit row per payment.  A request
retries at most ``limit`` payments, so one call never runs for minutes; ``more: true``
says the same body again retries the next ones (those already retried are no longer
parked, so nothing is retried twice).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.ops_leases import Reason
from orchestrator.api.schemas import _integral_number
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.engine.takeover import Actor
from orchestrator.ops.bulk_retry import bulk_retry_filter, parse_since, run_bulk_retry
from orchestrator.ops.bulk_retry_documents import bulk_retry_representation
from orchestrator.ops.errors import InvalidFilter, InvalidReason, UnknownConnectorAccount

router = APIRouter(prefix="/v1/ops", tags=["ops"])

DEFAULT_BULK_LIMIT = 500
# Each retry is a short transaction and a publish: a thousand keep one request well under
# any proxy's timeout, and ``more`` carries the rest to the next request.
MAX_BULK_LIMIT = 1000


class BulkRetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    status: Literal["needs_attention"] = Field(
        description="Which payments: only needs_attention (parked) payments are retried. "
        "A processing one resumes by itself or is taken over; a finished one has nothing "
        "left to retry."
    )
    reason: Reason
    since: str | None = Field(
        default=None,
        max_length=64,
        description="Only payments parked at or after this time: ISO 8601 with a zone.",
        examples=["2026-12-05T14:00:00Z"],
        json_schema_extra={"format": "date-time"},
    )
    connector_account: str | None = Field(
        default=None,
        max_length=40,
        # Documentation only (the bulk filter checks it, with a message saying what is wrong).
        json_schema_extra={"pattern": f"^(ca_[0-9a-f]{{24}}|{PLATFORM_CIRCUIT_KEY})$"},
        description=f"Only payments on this connector account (ca_…; {PLATFORM_CIRCUIT_KEY}: "
        "the platform's own account).",
    )
    dry_run: bool = Field(
        default=False, description="List what would be retried; change nothing, audit nothing."
    )
    limit: Annotated[int, BeforeValidator(_integral_number)] = Field(
        default=DEFAULT_BULK_LIMIT,
        ge=1,
        le=MAX_BULK_LIMIT,
        description="At most this many payments per request; `more` says whether others wait.",
    )


class BulkRetryItemOut(BaseModel):
    payment_id: str
    connector_account: str = Field(description=f"{PLATFORM_CIRCUIT_KEY}: the platform's own.")
    parked_at: str
    last_error: str | None
    result: Literal["retried", "would_retry", "skipped"]
    skipped_because: Literal["not_parked", "finished", "changed"] | None = Field(
        description="Why a listed payment was not retried (nothing written for it): "
        "not_parked: someone retried it since; finished: it succeeded or failed since; "
        "changed: still parked, but its lease changed since it was listed."
    )
    old_token: int = Field(description="The lease token as listed.")
    new_token: int | None
    published: bool | None = Field(
        description="false: the broker refused the wake-up; the sweeper re-queues it when "
        "its dispatch lease expires. null: not retried."
    )
    audit_id: int | None


class BulkRetryOut(BaseModel):
    object: Literal["bulk_retry"]
    dry_run: bool
    status: Literal["needs_attention"]
    since: str | None
    connector_account: str | None
    matched: int = Field(description="Parked payments this request looked at.")
    retried: int
    would_retry: int = Field(description="A dry run's count; 0 otherwise.")
    skipped: int
    skipped_because: dict[str, int]
    not_published: int
    more: bool = Field(
        description="The limit stopped this request and more matching payments are parked: "
        "send the same body again."
    )
    data: list[BulkRetryItemOut]


_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": BulkRetryRequest.model_json_schema()}},
    }
}


@router.post(
    "/payments/retry",
    summary="Retry parked (needs_attention) payments in bulk, oldest first",
    openapi_extra=_BODY,
    response_model=BulkRetryOut,
    responses={
        200: {"description": "What matched, what was retried (one audit row each), skipped"},
        400: problem(
            "The body is not valid JSON, misses the status or the reason, or a filter is "
            "invalid (a status other than needs_attention, a time without its zone)"
        ),
        404: problem("No such connector account"),
        413: problem("Body larger than 64 KiB"),
        415: problem("Body is not application/json"),
        **AUTH_ERRORS,
    },
)
def post_bulk_retry(container: ContainerDep, client: OpsClient, body: JsonBody) -> JSONResponse:
    payload = parse_model(BulkRetryRequest, body)
    try:
        filters = bulk_retry_filter(
            container.uow,
            status=payload.status,
            since=None if payload.since is None else parse_since(payload.since),
            connector=payload.connector_account,
        )
        summary = run_bulk_retry(
            container.uow,
            container.publisher,
            container.settings,
            Actor.operator(client.id, client.name),
            filters,
            reason=payload.reason,
            dry_run=payload.dry_run,
            limit=payload.limit,
        )
    except (InvalidReason, InvalidFilter) as error:
        raise Problem(400, "invalid-request", error.message) from None
    except UnknownConnectorAccount as error:
        raise Problem(404, "not-found", error.message) from None
    return JSONResponse(bulk_retry_representation(summary))
