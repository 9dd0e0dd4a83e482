"""``/v1/payments``: accept, read, look up by idempotency key."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.api.accept_route import (
    accept_route,
    bearer_credentials,
    bind_client,
    idempotency_key,
    merchant,
    serve_with,
    unauthorized,
)
from orchestrator.api.body import RawBody, json_from_raw, parse_model
from orchestrator.api.deps import (
    IDEMPOTENCY_KEY_PATTERN,
    ContainerDep,
    IdempotencyKey,
    JsonBody,
    MerchantClient,
)
from orchestrator.api.problems import Problem
from orchestrator.api.query_parameters import (
    ISO_OR_UNIX_TIME_SCHEMA,
    invalid_parameters,
    time_parameter,
)
from orchestrator.api.responses import (
    AUTH_ERRORS,
    ETAG,
    LOCATION,
    REPLAYED,
    RETRY_AFTER,
    accepted_response,
    conditional_response,
    current_payment_bytes,
    payment,
    payment_document,
    payment_headers,
    problem,
)
from orchestrator.api.role_problems import not_a_merchant
from orchestrator.api.schemas import PaymentCreate, PaymentList, PaymentOut
from orchestrator.bootstrap import Container
from orchestrator.domain.fingerprint import request_fingerprint
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.method_ownership import ForeignPaymentMethod
from orchestrator.domain.model import ApiClient, Role
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.services.accept import (
    Accepted,
    AuthenticatedClaimOnLoop,
    IdempotencyKeyReused,
    accept_payment,
    authenticate_and_accept,
    keyed_claim,
    new_payment,
    replay_existing,
)
from orchestrator.services.api_keys import active_found
from orchestrator.services.payment_ownership import (
    UnusableConnectorAccount,
    request_needs_thread_path,
)
from orchestrator.services.payment_reads import (
    DEFAULT_CLIENT_PAGE_SIZE,
    MAX_CLIENT_PAGE_SIZE,
    ClientPaymentQuery,
    UnknownPosition,
    get_payment,
    list_client_payments,
)

router = APIRouter(tags=["payments"])

PAYMENTS_PATH = "/v1/payments"

_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PaymentCreate"}}},
    }
}


def create_payment(
    container: ContainerDep,
    client: MerchantClient,
    body: JsonBody,
    idempotency_key: IdempotencyKey,
) -> Response:
    """The documented signature (OpenAPI: security, header, body).  Requests are served by
    ``accept_route``'s handler, which calls ``accept`` with the same checks in the same
    order, without FastAPI's dependency solving (orchestrator.api.accept_route)."""
    return accept(container, client, idempotency_key, body)


def accept(container: Container, client: ApiClient, idempotency_key: str, body: Any) -> Response:
    # The thread path's accept after the authentication (SQLite; PostgreSQL's requests
    # that fail a check).  An async variant on SQLAlchemy's asyncio engine was slower in
    # the benchmark; the event loop's accept is accept_on_loop, on psycopg itself.
    payload, fingerprint = validated_payment(body)
    try:
        accepted = accept_payment(
            container.statement_uow,
            container.publisher,
            container.settings,
            client,
            idempotency_key,
            payload.to_domain(),
            fingerprint,
        )
    except IdempotencyKeyReused as reused:
        raise key_reused(reused) from None
    except (UnusableConnectorAccount, ForeignPaymentMethod) as refusal:
        raise refused(refusal) from None
    return accepted_answer(container, accepted)


def serve_accept(container: Container, request: Request, raw: RawBody) -> Response:
    """``POST /v1/payments`` as ``accept_route`` serves it.  On PostgreSQL, a request whose
    headers and body pass every check costs one statement that authenticates and claims
    (``authenticate_and_accept``); any other request, and SQLite, take the separate read
    and claim (``serve_with(accept)``).  The answers and their order are the same: a
    request with a bad body still learns of its bad key first."""
    claim = container.authenticated_claim
    credentials = bearer_credentials(request.headers.get("authorization"))
    if claim is None or credentials is None:
        return _serve_separately(container, request, raw)
    try:
        key = idempotency_key(request.headers.get("idempotency-key"))
        payload, fingerprint = validated_payment(json_from_raw(raw))
    except Problem:
        # The declared order: 401/403 before anything about the body or the key.
        merchant(container, request)
        raise
    if request_needs_thread_path(payload.to_domain()):
        # A pinned account, a customer or a possibly saved method: the thread path checks
        # them before its claim (services.payment_ownership).
        return _serve_separately(container, request, raw)
    try:
        keyed = authenticate_and_accept(
            claim,
            container.statement_uow,
            container.publisher,
            container.settings,
            credentials,
            key,
            payload.to_domain(),
            fingerprint,
            authenticated=lambda client: bind_client(request, client),
        )
    except IdempotencyKeyReused as reused:
        raise key_reused(reused) from None
    except (UnusableConnectorAccount, ForeignPaymentMethod) as refusal:
        raise refused(refusal) from None
    if keyed.client is None:
        raise unauthorized("The API key is unknown or revoked.")
    if keyed.accepted is None:
        raise not_a_merchant(request)
    return accepted_answer(container, keyed.accepted)


_serve_separately = serve_with(accept)


async def accept_on_loop(container: Container, request: Request, raw: RawBody) -> Response | None:
    """``serve_accept``'s common cases on the event loop, without a thread: a request that
    passes every check, from an active merchant, with a new key or a taken one (its replay
    or its 422; orchestrator.db.accept_claims).  None for anything else, and ``serve_accept``
    answers it from the start: a refusal, a purged key, no connection free in time, a stale
    clock sample, SQLite or ``WAKE_UP=publish``."""
    claim: AuthenticatedClaimOnLoop | None = request.app.state.async_claim
    credentials = bearer_credentials(request.headers.get("authorization"))
    if claim is None or credentials is None:
        return None
    now = claim.now()
    if now is None:
        return None
    try:
        key = idempotency_key(request.headers.get("idempotency-key"))
        payload, fingerprint = validated_payment(json_from_raw(raw))
    except Problem:
        return None  # the declared order (401/403 first) is serve_accept's
    if request_needs_thread_path(payload.to_domain()):
        return None  # ownership and the pinned account are the thread path's
    settings = container.settings
    prepared = keyed_claim(now, settings, credentials, key, payload.to_domain(), fingerprint)
    if prepared is None:
        return None
    answered = await claim(prepared.key_hash, prepared.values, prepared.notify)
    if answered is None:
        return None
    found, inserted = answered
    client = active_found(found, prepared.key_hash)
    if client is None or client.role is not Role.MERCHANT:
        return None  # nothing was inserted: the thread path sees what this one saw
    if inserted:
        bind_client(request, client)
        return accepted_answer(
            container, new_payment(prepared, client, settings, container.publisher)
        )
    # The key is taken (a retry, a storm of them): its replay, read on the loop too.
    existing = await claim.find_by_key(client.id, key)
    if existing is None:
        return None  # purged meanwhile, or no connection: the thread path claims anew
    bind_client(request, client)
    try:
        replayed = replay_existing(existing, settings, client, key, fingerprint)
    except IdempotencyKeyReused as reused:
        raise key_reused(reused) from None
    return accepted_answer(container, replayed)


router.add_api_route(
    PAYMENTS_PATH,
    create_payment,
    methods=["POST"],
    status_code=202,
    summary="Accept a payment (idempotent)",
    openapi_extra=_REQUEST_BODY,
    response_model=PaymentOut,
    responses={
        200: payment(
            "Replay of a finished payment (`Idempotent-Replayed: true`): byte for byte the "
            "body stored when it finished, the same body a GET of the payment answers",
            {"Location": LOCATION, "Idempotent-Replayed": REPLAYED},
        ),
        202: payment(
            "Accepted (new key), or a replay of a payment not finished yet: byte for byte "
            "the first 202's body (the payment's URL tells its current state)",
            {"Location": LOCATION, "Retry-After": RETRY_AFTER, "Idempotent-Replayed": REPLAYED},
        ),
        400: problem("Idempotency-Key missing or malformed, or the body is invalid"),
        413: problem("Body larger than 64 KiB"),
        415: problem("Body is not application/json"),
        422: problem("The Idempotency-Key was already used with a different request"),
        **AUTH_ERRORS,
    },
    route_class_override=accept_route(serve_accept, accept_on_loop),
)


def validated_payment(body: Any) -> tuple[PaymentCreate, str]:
    """The strict body and its fingerprint, or a 400 problem."""
    payload = parse_model(PaymentCreate, body)
    rule_errors = payload.rule_errors()
    if rule_errors:
        listed = "; ".join(f"{e['field']}: {e['message']}" for e in rule_errors)
        raise Problem(400, "invalid-request", f"Fix these fields: {listed}", errors=rule_errors)
    return payload, request_fingerprint("POST", PAYMENTS_PATH, payload.fingerprint_body())


def refused(refusal: UnusableConnectorAccount | ForeignPaymentMethod) -> Problem:
    """400 before anything is stored: another merchant's customer or saved method
    (``foreign-payment-method``), or a pinned account that is not usable."""
    if isinstance(refusal, ForeignPaymentMethod):
        return Problem(
            400,
            "foreign-payment-method",
            f"{refusal.field} belongs to another merchant: a saved customer or payment method "
            "is only ever used by the merchant whose payment first named it.",
            errors=[{"field": refusal.field, "message": "belongs to another merchant"}],
        )
    return Problem(
        400,
        "invalid-request",
        f"Fix these fields: {refusal.field}: {refusal.message}",
        errors=[{"field": refusal.field, "message": refusal.message}],
    )


def key_reused(reused: IdempotencyKeyReused) -> Problem:
    return Problem(
        422,
        "idempotency-key-reused",
        "This Idempotency-Key was already used with a different request body. Use a "
        "new key for a new payment, or resend the original body to get its result.",
        payment_id=reused.record.id,
    )


def accepted_answer(container: Container, accepted: Accepted) -> Response:
    return accepted_response(
        accepted.record,
        replayed=accepted.replayed,
        poll_interval=container.settings.poll_interval_seconds,
    )


@router.get(
    PAYMENTS_PATH + "/{payment_id}",
    summary="Read a payment",
    response_model=PaymentOut,
    description=(
        "Poll this while the payment is `processing`, every `Retry-After` seconds. Each "
        "answer carries a strong `ETag` that changes with every change of the payment (a "
        "status, a provider id, an attempt, the finish) and only then; send it back in "
        "`If-None-Match` and the answer is `304 Not Modified` without a body until "
        "something changed."
    ),
    responses={
        200: payment("The payment", {"Retry-After": RETRY_AFTER, "ETag": ETAG}),
        304: {
            "description": "Not modified: If-None-Match names the current ETag. No body.",
            "headers": {"ETag": ETAG, "Retry-After": RETRY_AFTER},
        },
        400: problem("The URL contains control characters"),
        404: problem("No such payment for this client"),
        **AUTH_ERRORS,
    },
)
def read_payment(
    container: ContainerDep,
    client: MerchantClient,
    payment_id: str,
    if_none_match: Annotated[
        str | None,
        Header(
            description="ETag(s) from an earlier answer (or `*`): 304 without a body while "
            "the payment has not changed."
        ),
    ] = None,
) -> Response:
    # An id that cannot exist is answered without a query: whatever a client guesses
    # (any length, any characters) costs one indexed read at most.
    record = (
        get_payment(container.read_only_uow, client, payment_id)
        if is_payment_id(payment_id)
        else None
    )
    if record is None:
        raise Problem(404, "not-found", "No such payment exists for this API client.")
    headers = payment_headers(record, poll_interval=container.settings.poll_interval_seconds)
    headers.pop("Location")
    return conditional_response(
        current_payment_bytes(record), if_none_match=if_none_match, headers=headers
    )


# Everything the list takes.  Anything else is refused: a misspelt filter (``stauts``)
# silently ignored would list every payment as if it matched.
_LIST_PARAMETERS = frozenset(
    {
        "limit",
        "starting_after",
        "ending_before",
        "status",
        "created[gte]",
        "created[lt]",
        "idempotency_key",
    }
)


@router.get(
    PAYMENTS_PATH,
    summary="List your payments, newest first (or find one by its Idempotency-Key)",
    response_model=PaymentList,
    description=(
        "Your payments, newest first, `limit` at a time (decision 0089). `has_more` says "
        "whether more payments follow in the direction you paged: pass the last payment's "
        "`id` as `starting_after` for the next (older) page, or the first payment's `id` as "
        "`ending_before` for the previous (newer) one. Filters combine: `status`, "
        "`created[gte]` (inclusive) and `created[lt]` (exclusive), each an ISO 8601 time "
        "with a time zone or Unix seconds, and `idempotency_key` (0 or 1 payment). Another "
        "client's payments are never listed. An unknown parameter is refused, so a "
        "misspelt filter cannot silently list everything."
    ),
    responses={
        400: problem(
            "A parameter is invalid (named in `errors`): limit out of 1-100, an unknown "
            "status, a time without a time zone, starting_after and ending_before together, "
            "a starting_after/ending_before that is not one of your payments, an "
            "idempotency_key that is not 1-255 printable ASCII, or an unknown parameter"
        ),
        **AUTH_ERRORS,
    },
)
def list_payments(
    request: Request,
    container: ContainerDep,
    client: MerchantClient,
    limit: Annotated[
        int,
        Query(ge=1, le=MAX_CLIENT_PAGE_SIZE, description="How many payments, 1-100."),
    ] = DEFAULT_CLIENT_PAGE_SIZE,
    starting_after: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=255,
            description="A payment id: the page of payments created before it.",
        ),
    ] = None,
    ending_before: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=255,
            description="A payment id: the page of payments created just after it.",
        ),
    ] = None,
    status: Annotated[
        PaymentStatus | None, Query(description="Only payments with this status.")
    ] = None,
    created_gte: Annotated[
        str | None,
        Query(
            alias="created[gte]",
            json_schema_extra=ISO_OR_UNIX_TIME_SCHEMA,
            description="Created at or after this time (ISO 8601 with a time zone, or Unix "
            "seconds).",
        ),
    ] = None,
    created_lt: Annotated[
        str | None,
        Query(
            alias="created[lt]",
            json_schema_extra=ISO_OR_UNIX_TIME_SCHEMA,
            description="Created before this time (ISO 8601 with a time zone, or Unix seconds).",
        ),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=255,
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="The Idempotency-Key a payment was created with: 0 or 1 payment.",
        ),
    ] = None,
) -> JSONResponse:
    _refuse_unknown_parameters(request)
    if starting_after is not None and ending_before is not None:
        raise invalid_parameters(
            "Send starting_after (an older page) or ending_before (a newer page), not both.",
            {
                "starting_after": "not with ending_before",
                "ending_before": "not with starting_after",
            },
        )
    query = ClientPaymentQuery(
        filters=PaymentFilters(
            status=status,
            idempotency_key=idempotency_key,
            created_after=time_parameter("created[gte]", created_gte, unix_seconds=True),
            created_before=time_parameter("created[lt]", created_lt, unix_seconds=True),
        ),
        limit=limit,
        starting_after=starting_after,
        ending_before=ending_before,
    )
    try:
        page = list_client_payments(container.read_only_uow, client, query)
    except UnknownPosition as unknown:
        raise invalid_parameters(
            f"{unknown.parameter}: none of your payments has this id; pass the id of a "
            "payment from a page this API listed.",
            {unknown.parameter: "not one of your payments"},
        ) from None
    return JSONResponse(
        {"data": [payment_document(r) for r in page.records], "has_more": page.has_more}
    )


def _refuse_unknown_parameters(request: Request) -> None:
    unknown = sorted(set(request.query_params) - _LIST_PARAMETERS)
    if unknown:
        raise invalid_parameters(
            f"Unknown parameter(s): {', '.join(unknown)}. This list takes "
            f"{', '.join(sorted(_LIST_PARAMETERS))}.",
            {name: "unknown parameter" for name in unknown},
        )
