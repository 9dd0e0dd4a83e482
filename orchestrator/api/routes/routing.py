"""``/v1/routing``: a merchant's routing configuration (merchant keys), its dry run, and
the ops read of any merchant's (``/v1/ops/clients/{id}/routing``).

The configuration is replaced whole by ``PUT`` with an optional ``If-Match`` (its
``ETag``; ``"0"`` before any ``PUT``); a stale one is 412 and nothing changes.  A ``GET``
answers exactly what a ``PUT`` takes (``{"rules", "default"}``), so a read, edited, can be
sent back as it is.  Every refused configuration is one 400 listing each problem with the
field to fix (``rules[2].split``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.deps import ContainerDep, JsonBody, MerchantClient, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.connector_accounts import IfMatch
from orchestrator.api.routes.payments import refused, validated_payment
from orchestrator.api.schemas import PaymentCreate
from orchestrator.bootstrap import Container
from orchestrator.domain.ids import PAYMENT_ID_PATTERN, is_payment_id, new_payment_id
from orchestrator.domain.preconditions import TagList, parse_tag_list
from orchestrator.domain.routing import InvalidConfiguration
from orchestrator.services.payment_ownership import UnusableConnectorAccount
from orchestrator.services.routing import (
    RoutingConflict,
    RoutingPreconditionFailed,
    RoutingService,
    RoutingView,
)

router = APIRouter(tags=["routing"])

ROUTING_PATH = "/v1/routing"

AccountIds = Annotated[
    list[Annotated[str, StringConstraints(pattern=r"^(ca_[0-9a-f]{24}|platform)$")]],
    Field(
        min_length=1,
        description="Connector account ids (`ca_…`) in failover order; `platform` names the "
        "platform's Stripe account.",
        examples=[["ca_3f9a0c1b2d4e5f60718293a4", "platform"]],
    ),
]


class ConditionsDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    currency: list[str] | None = Field(default=None, examples=[["eur"]])
    amount_gte: int | None = Field(default=None, description="Minor units; the amount ≥ this.")
    amount_lt: int | None = Field(default=None, description="Minor units; the amount < this.")
    capture_method: Literal["automatic", "manual"] | None = None
    off_session: bool | None = Field(
        default=None, description="true: merchant-initiated; false: not (unset counts as false)."
    )
    metadata: dict[str, str] | None = Field(
        default=None, description="Each key must equal this value in the payment's metadata."
    )


class SplitDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: int = Field(ge=1, le=100, description="The weights of a split sum to 100.")
    then: AccountIds


class RuleDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=100, description="Unique in the configuration.")
    if_: ConditionsDoc = Field(
        default_factory=ConditionsDoc,
        alias="if",
        description="All optional; all that are set must hold. `{}` matches every payment.",
    )
    then: AccountIds | None = Field(default=None, description="The route (or `split`).")
    split: list[SplitDoc] | None = Field(
        default=None,
        description="Weighted routes, picked deterministically from the payment id (or `then`).",
    )


class RoutingDoc(BaseModel):
    """The configuration, as ``GET`` answers and ``PUT`` takes it."""

    model_config = ConfigDict(extra="forbid")

    rules: list[RuleDoc] = Field(
        default_factory=list, description="Tried in order; the first that matches wins."
    )
    default: AccountIds = Field(description="The route of a payment no rule matches.")


class EvaluateRequest(PaymentCreate):
    """A payment body, as ``POST /v1/payments`` takes it, and optionally the payment id a
    ``split`` picks by."""

    payment_id: Annotated[str, StringConstraints(pattern=PAYMENT_ID_PATTERN)] | None = Field(
        default=None,
        description="The id a weighted split picks by (a new random one when not sent; the "
        "answer names it).",
    )


class SkipOut(BaseModel):
    connector_account: str
    reason: str = Field(description="`disabled` or `no_payment_method`.")


class EvaluationOut(BaseModel):
    route: list[str] = Field(description="The accounts the payment would be tried on, in order.")
    rule: str | None = Field(description="The rule that matched; null: the default route.")
    skipped: list[SkipOut]
    payment_id: str = Field(description="The id a split picked by.")


def _body(model: type[BaseModel]) -> dict[str, Any]:
    """The request body's schema, its nested models referenced in the document's
    components (where the responses put them: a ``$defs`` inside an operation would not
    resolve from the document's root)."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _precondition(if_match: str | None) -> TagList | None:
    if if_match is None:
        return None
    parsed = parse_tag_list(if_match)
    if parsed is None:
        raise Problem(
            400,
            "invalid-request",
            'If-Match must be "*" or a list of entity tags in double quotes, such as "3".',
        )
    return parsed


def _service(container: Container) -> RoutingService:
    return container.routing_service()


def _answer(view: RoutingView) -> JSONResponse:
    return JSONResponse(
        view.configuration.document(),
        headers={"ETag": view.etag, "Cache-Control": "no-store"},
    )


_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": 'The configuration (`ETag`: its version, `"0"` before any PUT)',
        "headers": {"ETag": {"schema": {"type": "string"}}},
    }
}


@router.get(
    ROUTING_PATH,
    summary="Read your routing configuration",
    response_model=RoutingDoc,
    responses={**_ANSWER, **AUTH_ERRORS},
)
def get_routing(container: ContainerDep, client: MerchantClient) -> Response:
    return _answer(_service(container).current(client.id))


@router.put(
    ROUTING_PATH,
    summary="Replace your routing configuration",
    openapi_extra=_body(RoutingDoc),
    response_model=RoutingDoc,
    responses={
        **_ANSWER,
        400: problem("Invalid rules (each problem names its field), or a bad If-Match"),
        409: problem("Changed concurrently; read it again"),
        412: problem("If-Match does not name the configuration's current etag; nothing changed"),
        **AUTH_ERRORS,
    },
)
def put_routing(
    container: ContainerDep, client: MerchantClient, body: JsonBody, if_match: IfMatch = None
) -> Response:
    precondition = _precondition(if_match)
    try:
        view = _service(container).replace(client.id, body, if_match=precondition)
    except InvalidConfiguration as invalid:
        errors = [e.document() for e in invalid.errors]
        listed = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        raise Problem(
            400, "invalid-request", f"Fix these fields: {listed}", errors=errors
        ) from None
    except RoutingPreconditionFailed as stale:
        raise Problem(412, "precondition-failed", stale.message) from None
    except RoutingConflict as conflict:
        raise Problem(409, "conflict", conflict.message) from None
    return _answer(view)


@router.post(
    f"{ROUTING_PATH}/evaluate",
    summary="Dry run: the route a payment would be given now",
    openapi_extra=_body(EvaluateRequest),
    response_model=EvaluationOut,
    responses={
        400: problem("The payment body is invalid, or no account of the route could take it"),
        **AUTH_ERRORS,
    },
)
def evaluate_routing(container: ContainerDep, client: MerchantClient, body: JsonBody) -> Response:
    if not isinstance(body, dict):
        raise Problem(400, "invalid-request", "The body must be a JSON object.")
    given = dict(body)
    payment_id = given.pop("payment_id", None)
    if payment_id is None:
        payment_id = new_payment_id()
    elif not isinstance(payment_id, str) or not is_payment_id(payment_id):
        message = "must be a payment id (pay_ and 32 hex digits)"
        raise Problem(
            400,
            "invalid-request",
            f"Fix these fields: payment_id: {message}",
            errors=[{"field": "payment_id", "message": message}],
        )
    payload, _fingerprint = validated_payment(given)
    try:
        decision = _service(container).evaluate(client, payload.to_domain(), payment_id)
    except UnusableConnectorAccount as refusal:
        raise refused(refusal) from None
    return JSONResponse(
        {**decision.document(), "payment_id": payment_id}, headers={"Cache-Control": "no-store"}
    )


@router.get(
    "/v1/ops/clients/{client_id}/routing",
    tags=["ops"],
    summary="Read a merchant's routing configuration",
    response_model=RoutingDoc,
    responses={**_ANSWER, 404: problem("No such client"), **AUTH_ERRORS},
)
def ops_get_routing(
    container: ContainerDep,
    _ops: OpsClient,
    client_id: Annotated[str, Path(max_length=40)],
) -> Response:
    view = _service(container).current_for_ops(client_id)
    if view is None:
        raise Problem(404, "not-found", f"No client {client_id!r} exists.")
    return _answer(view)
