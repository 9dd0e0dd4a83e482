"""``/v1/ops``: leases, takeover, retry, a refund sync and the audit trail (API keys with the
``ops`` role), and the schemas the other ops routes share (``LeaseOut``, ``AuditOut``).

Every operator action is audited under the calling ops client (its id and name).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.schemas import FreeText
from orchestrator.domain.encoding import iso
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.lease_state import LeaseState
from orchestrator.domain.model import ApiClient
from orchestrator.domain.operations import is_operation_id
from orchestrator.domain.preconditions import TagList, parse_tag_list
from orchestrator.engine.takeover import Actor
from orchestrator.ops.commands import retry_payment, take_over_payment
from orchestrator.ops.errors import (
    MAX_REASON_LENGTH,
    InvalidReason,
    OpsError,
    PaymentNotFound,
    PreconditionFailed,
)
from orchestrator.ops.lease_documents import (
    action_representation,
    audit_representation,
    lease_representation,
)
from orchestrator.ops.lease_reads import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, list_audit, list_leases
from orchestrator.ops.refund_sync import sync_payment_refunds

router = APIRouter(prefix="/v1/ops", tags=["ops"])

# The shape of orchestrator.domain.ids.new_payment_id(): anything else cannot exist, and is
# answered 404 without a query and without echoing the input.

Reason = Annotated[
    FreeText,
    StringConstraints(min_length=1, max_length=MAX_REASON_LENGTH),
    Field(description="Why: recorded in the audit trail.", examples=["worker host died"]),
]


class TakeoverRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason
    force: bool = Field(
        default=False,
        description=(
            "Take over a lease that has not expired yet. The holder is fenced out (its "
            "writes are refused) even if it is still working."
        ),
    )


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason


class SyncRefundsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason


class RejectedIntentOut(BaseModel):
    id: str
    status: str
    amount: int
    currency: str
    reasons: list[str] = Field(description="How the intent differs from the payment.")


class LeaseOut(BaseModel):
    kind: Literal["charge", "capture", "cancel", "refund", "refund_sync"] = Field(
        description="Which operation holds this lease: a payment's charge, or an operation."
    )
    operation_id: str = Field(
        description="What takeover and retry take: the payment's id for its charge, the "
        "operation's (rfd_…, cap_…, cnl_…, rsy_…) otherwise."
    )
    payment_id: str
    client_id: str
    # A payment waiting for its capture holds no lease but is listed with its status.
    status: Literal[
        "processing", "requires_capture", "succeeded", "failed", "canceled", "needs_attention"
    ]
    recovery_point: Literal["accepted", "intent_created", "provider_settled", "completed"]
    lease_owner: str | None
    lease_token: int = Field(description="Fencing token; every takeover bumps it.")
    locked_until: str | None
    lease_expired: bool | None = Field(description="Null when the record holds no lease.")
    lease_state: Literal["active", "expired", "deferred", "retry_due", "none", "finished"] = Field(
        description="'deferred': a long backoff waits in the row; no worker holds it."
    )
    next_attempt_at: str | None = Field(description="Set while a long backoff is deferred.")
    attempts: int
    unknown_outcomes: int
    last_error: str | None
    amount: int | None
    currency: str
    provider_payment_id: str | None
    provider_object_id: str | None = Field(
        default=None, description="An operation's provider object (a refund's re_…)."
    )
    lookup_pending: bool = Field(
        description="A create's outcome is unknown and the provider lookup is still owed."
    )
    lookup_pages: int = Field(description="Pages of the provider lookup read so far.")
    rejected_intents: list[RejectedIntentOut] = Field(
        description="Provider intents that named this payment but did not match it "
        "(amount, currency, customer, capture or payment method); never confirmed."
    )
    created_at: str
    updated_at: str
    etag: str = Field(
        description="The lease state this row shows (lease token and status). Send it as "
        "If-Match with a takeover or retry: if the lease changed since, the command is "
        "refused with 412 and changes nothing.",
        examples=['"7.processing"'],
    )


class LeaseList(BaseModel):
    state: Literal["expired", "active", "deferred", "needs_attention", "unfinished"]
    now: str = Field(description="The database clock the states were judged by.")
    data: list[LeaseOut]


class AuditOut(BaseModel):
    id: int
    created_at: str
    actor_client_id: str = Field(description="Ops API client id, or 'cli:<operator>'.")
    actor_name: str
    action: Literal[
        "takeover",
        "park",
        "retry",
        "redeliver",
        "sync_refunds",
        "capture",
        "cancel",
        "disable_connector_account",
        "issue_api_key",
        "revoke_api_key",
    ]
    payment_id: str = Field(
        description="The subject: a payment (pay_…), a connector account (ca_…) or a key (key_…)."
    )
    operation_id: str | None = Field(
        default=None, description="The operation acted on (rfd_…); null: the payment's charge."
    )
    reason: str
    old_token: int | None
    new_token: int | None


class RefundSyncOut(BaseModel):
    id: str = Field(description="The refund sync (rsy_…): an operation like any other.")
    object: Literal["refund_sync"]
    payment_id: str
    status: Literal["processing", "succeeded", "failed", "needs_attention"]
    queued: bool = Field(
        description="False: a sync already queued (not yet claimed) covers this request."
    )
    audit: AuditOut


class AuditList(BaseModel):
    data: list[AuditOut]


class OperatorActionOut(BaseModel):
    payment_id: str
    action: Literal["takeover", "park", "retry"] = Field(
        description="'park': the payment was out of attempts and went to needs_attention "
        "instead; retry it to reset them."
    )
    status: Literal["processing", "needs_attention"]
    old_token: int
    new_token: int
    published: bool | None = Field(
        description="Whether the work was re-queued on the broker. false: it will be, by "
        "the sweeper, once the dispatch lease expires. null: nothing to queue (parked)."
    )
    audit: AuditOut
    lease: LeaseOut


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    # Bodies are parsed by hand (read_json_body): document them explicitly.
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


_COMMAND_ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem("The body is not valid JSON or misses a reason, or If-Match is malformed"),
    404: problem("No such payment"),
    412: problem(
        "If-Match does not name the payment's current lease state: someone acted since "
        "you looked. Nothing changed and nothing was audited."
    ),
    413: problem("Body larger than 64 KiB"),
    415: problem("Body is not application/json"),
    **AUTH_ERRORS,
}


def _operator(client: ApiClient) -> Actor:
    return Actor.operator(client.id, client.name)


# "*" or a list of entity tags, the empty list included (parse_tag_list).
ETAG_LIST_PATTERN = r'^ *(\*|((W/)?"[!#-~]*"( *, *(W/)?"[!#-~]*")*)?) *$'

IfMatch = Annotated[
    str | None,
    Header(
        description="The `etag` of the lease as you saw it (`GET /v1/ops/leases`, or the "
        "`lease` of an earlier command's answer), or `*`. Optional; with it, a lease that "
        "changed since (another operator, the sweeper, a worker) refuses the command with "
        "412, so two operators acting on the same payment at once cannot both win.",
        examples=['"7.processing"'],
        # Documentation only (the parser in orchestrator.domain.preconditions decides, and a
        # malformed value is a 400): a list of quoted tags, or *.
        json_schema_extra={"pattern": ETAG_LIST_PATTERN},
    ),
]


def _precondition(if_match: str | None) -> TagList | None:
    if if_match is None:
        return None
    parsed = parse_tag_list(if_match)
    if parsed is None:
        raise Problem(
            400,
            "invalid-request",
            'If-Match must be "*" or a list of entity tags in double quotes, such as '
            '"7.processing" (quotes included).',
        )
    return parsed


def _known_shape(payment_id: str) -> str:
    # A payment's id names its charge; an operation's id (rfd_…, cap_…, cnl_…) the operation.
    if not (is_payment_id(payment_id) or is_operation_id(payment_id)):
        raise Problem(404, "not-found", "No such payment or operation exists.")
    return payment_id


def _problem(error: OpsError) -> Problem:
    if isinstance(error, InvalidReason):
        return Problem(400, "invalid-request", error.message)
    if isinstance(error, PaymentNotFound):
        return Problem(404, "not-found", error.message)
    if isinstance(error, PreconditionFailed):
        return Problem(412, "precondition-failed", error.message)
    extensions: dict[str, Any] = {}
    if error.record is not None:
        extensions = {
            "payment_status": error.record.status.value,
            "lease_owner": error.record.lease_owner,
            "locked_until": iso(error.record.locked_until),
        }
    return Problem(409, "conflict", error.message, **extensions)


@router.get(
    "/leases",
    summary="List leases by state",
    response_model=LeaseList,
    responses={400: problem("Unknown state or limit out of range"), **AUTH_ERRORS},
)
def get_leases(
    container: ContainerDep,
    _client: OpsClient,
    state: Annotated[
        LeaseState,
        Query(
            description="expired: the sweeper's next work; active: live leases; "
            "deferred: waiting for a stored retry time, nobody holds them; "
            "needs_attention: parked payments waiting for an operator; unfinished: all of "
            "these."
        ),
    ] = LeaseState.EXPIRED,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
) -> JSONResponse:
    listing = list_leases(container.read_only_uow, state, limit=limit)
    return JSONResponse(
        {
            "state": listing.state.value,
            "now": iso(listing.now),
            "data": [lease_representation(r, listing.now) for r in listing.records],
        }
    )


@router.post(
    "/payments/{payment_id}/takeover",
    summary="Take over a payment's lease (fence out the holder, re-queue the work)",
    openapi_extra=_body_schema(TakeoverRequest),
    response_model=OperatorActionOut,
    responses={
        200: {"description": "Taken over (or parked when out of attempts); audited"},
        409: problem(
            "The payment is finished, needs attention (retry it instead), holds a live "
            "lease and force was not given, or changed concurrently"
        ),
        **_COMMAND_ERRORS,
    },
)
def post_takeover(
    container: ContainerDep,
    client: OpsClient,
    payment_id: str,
    body: JsonBody,
    if_match: IfMatch = None,
) -> JSONResponse:
    payload = parse_model(TakeoverRequest, body)
    precondition = _precondition(if_match)
    try:
        action = take_over_payment(
            container.uow,
            container.publisher,
            container.settings,
            _operator(client),
            _known_shape(payment_id),
            reason=payload.reason,
            force=payload.force,
            if_match=precondition,
        )
    except OpsError as error:
        raise _problem(error) from None
    return JSONResponse(action_representation(action))


@router.post(
    "/payments/{payment_id}/retry",
    summary="Retry a needs_attention payment from where it stopped",
    openapi_extra=_body_schema(RetryRequest),
    response_model=OperatorActionOut,
    responses={
        200: {"description": "Back to processing with fresh attempts; audited"},
        409: problem("The payment is not in needs_attention (finished or still processing)"),
        **_COMMAND_ERRORS,
    },
)
def post_retry(
    container: ContainerDep,
    client: OpsClient,
    payment_id: str,
    body: JsonBody,
    if_match: IfMatch = None,
) -> JSONResponse:
    payload = parse_model(RetryRequest, body)
    precondition = _precondition(if_match)
    try:
        action = retry_payment(
            container.uow,
            container.publisher,
            container.settings,
            _operator(client),
            _known_shape(payment_id),
            reason=payload.reason,
            if_match=precondition,
        )
    except OpsError as error:
        raise _problem(error) from None
    return JSONResponse(action_representation(action))


@router.post(
    "/payments/{payment_id}/sync_refunds",
    summary="Read the payment's refunds at the provider again (a refund made outside "
    "payorch whose event was lost)",
    openapi_extra=_body_schema(SyncRefundsRequest),
    response_model=RefundSyncOut,
    status_code=202,
    responses={
        202: {"description": "A refund sync is queued (the sweeper dispatches it); audited"},
        **_COMMAND_ERRORS,
    },
)
def post_sync_refunds(
    container: ContainerDep, client: OpsClient, payment_id: str, body: JsonBody
) -> JSONResponse:
    payload = parse_model(SyncRefundsRequest, body)
    if not is_payment_id(payment_id):
        raise Problem(404, "not-found", "No such payment exists.")
    try:
        queued = sync_payment_refunds(
            container.uow, _operator(client), payment_id, reason=payload.reason
        )
    except OpsError as error:
        raise _problem(error) from None
    return JSONResponse(
        {
            "id": queued.sync.id,
            "object": "refund_sync",
            "payment_id": queued.sync.payment_id,
            "status": queued.sync.status.value,
            "queued": queued.created,
            "audit": audit_representation(queued.audit),
        },
        status_code=202,
    )


@router.get(
    "/audit",
    summary="The audit trail of operator actions, newest first",
    response_model=AuditList,
    responses={400: problem("limit out of range"), **AUTH_ERRORS},
)
def get_audit(
    container: ContainerDep,
    _client: OpsClient,
    payment_id: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
) -> JSONResponse:
    entries = list_audit(container.read_only_uow, payment_id=payment_id, limit=limit)
    return JSONResponse({"data": [audit_representation(e) for e in entries]})
