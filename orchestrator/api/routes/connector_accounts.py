"""``/v1/connector_accounts``: a merchant's accounts at its providers (merchant keys).

Credentials are write-only: answers show ``…last4`` per field.  Changes take an optional
``If-Match`` (the account's ``etag``); a stale one is 412 and nothing changes.  DELETE
disables (an account that moved money is never forgotten)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, MerchantClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, CREATED_AT, RESOURCE_ETAG, problem, with_headers
from orchestrator.api.routes.ops_leases import ETAG_LIST_PATTERN
from orchestrator.bootstrap import Container
from orchestrator.domain.connector_accounts import ConnectorAccount
from orchestrator.domain.encoding import iso
from orchestrator.domain.preconditions import TagList, parse_tag_list
from orchestrator.services.connector_accounts import (
    AccountConflict,
    AccountError,
    AccountNotFound,
    AccountPreconditionFailed,
    ConnectorAccountService,
    InvalidAccount,
)

router = APIRouter(prefix="/v1/connector_accounts", tags=["connector accounts"])

Credentials = Annotated[
    dict[str, Any],
    Field(
        description='Stripe: `{"api_key": "sk_…"}` (or `rk_…`) or `{"stripe_account": '
        '"acct_…"}` (a connected account under the platform key, sent as `Stripe-Account`). '
        'Adyen: `{"api_key", "merchant_account", "hmac_key"}` (hex) and optionally '
        '`"live_url_prefix"`. Write-only: answers show `…last4` per field.',
        examples=[{"api_key": "sk_test_51Nxxxxxxxxxxxxxxxxxxxx"}],
    ),
]


class AccountCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    provider: Literal["stripe", "adyen"]
    name: str = Field(min_length=1, max_length=200, examples=["EU Stripe"])
    credentials: Credentials


class AccountUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = Field(default=None, min_length=1, max_length=200)
    credentials: Credentials | None = None


class AccountFields(BaseModel):
    """The account's own fields, as the merchant and the operator both see them."""

    id: str
    object: Literal["connector_account"]
    provider: Literal["stripe", "adyen"]
    name: str
    credentials: dict[str, str] = Field(
        description='`…last4` of each credential field, e.g. `{"api_key": "…4242"}`.'
    )
    status: Literal["enabled", "disabled"]
    disabled_reason: str | None
    created_at: str
    updated_at: str
    etag: str = Field(description="Send as If-Match with a change; stale is 412.")


class AccountOut(AccountFields):
    default: bool = Field(description="Whether payments naming no account run on this one.")


class AccountList(BaseModel):
    data: list[AccountOut]


def account_document(account: ConnectorAccount, *, default: bool) -> dict[str, Any]:
    return {
        "id": account.id,
        "object": "connector_account",
        "provider": account.provider,
        "name": account.name,
        "credentials": dict(account.credential_hints),
        "status": account.status.value,
        "disabled_reason": account.disabled_reason,
        "default": default,
        "created_at": iso(account.created_at),
        "updated_at": iso(account.updated_at),
        "etag": account.etag,
    }


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


IfMatch = Annotated[
    str | None,
    Header(
        description="The account's `etag` as you read it, or `*`. Optional; a stale one "
        "refuses the change with 412 and nothing changes.",
        examples=['"3"'],
        json_schema_extra={"pattern": ETAG_LIST_PATTERN},
    ),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem("Invalid body or credentials (the problem names the field), bad If-Match"),
    404: problem("No such connector account (or another client's)"),
    409: problem("Changed concurrently; read it again"),
    412: problem("If-Match does not name the account's current etag; nothing changed"),
    **AUTH_ERRORS,
}


def _service(container: Container) -> ConnectorAccountService:
    return container.connector_account_service()


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


def _problem(error: AccountError) -> Problem:
    if isinstance(error, InvalidAccount):
        field = error.field or "body"
        return Problem(
            400,
            "invalid-request",
            f"Fix these fields: {field}: {error.message}",
            errors=[{"field": field, "message": error.message}],
        )
    if isinstance(error, AccountNotFound):
        return Problem(404, "not-found", error.message)
    if isinstance(error, AccountPreconditionFailed):
        return Problem(412, "precondition-failed", error.message)
    assert isinstance(error, AccountConflict), error
    return Problem(409, "conflict", error.message)


def _answer(
    account: ConnectorAccount, default: str | None, *, status_code: int = 200
) -> JSONResponse:
    headers = {"ETag": account.etag, "Cache-Control": "no-store"}
    if status_code == 201:
        headers["Location"] = f"/v1/connector_accounts/{account.id}"
    return JSONResponse(
        account_document(account, default=account.id == default),
        status_code=status_code,
        headers=headers,
    )


@router.post(
    "",
    status_code=201,
    summary="Add a connector account (credentials are write-only)",
    openapi_extra=_body_schema(AccountCreate),
    response_model=AccountOut,
    responses={
        201: with_headers("Created", Location=CREATED_AT, ETag=RESOURCE_ETAG),
        **_ERRORS,
    },
)
def create_account(container: ContainerDep, client: MerchantClient, body: JsonBody) -> Response:
    payload = parse_model(AccountCreate, body)
    service = _service(container)
    try:
        account = service.create(
            client.id,
            provider=payload.provider,
            name=payload.name,
            credentials=payload.credentials,
        )
    except AccountError as error:
        raise _problem(error) from None
    return _answer(account, service.default_for(client.id), status_code=201)


@router.get(
    "", summary="List your connector accounts", response_model=AccountList, responses=AUTH_ERRORS
)
def list_accounts(container: ContainerDep, client: MerchantClient) -> Response:
    service = _service(container)
    default = service.default_for(client.id)
    return JSONResponse(
        {"data": [account_document(a, default=a.id == default) for a in service.list(client.id)]},
        headers={"Cache-Control": "no-store"},
    )


@router.get(
    "/{account_id}",
    summary="Read a connector account",
    response_model=AccountOut,
    responses={200: with_headers("The account", ETag=RESOURCE_ETAG), **_ERRORS},
)
def get_account(container: ContainerDep, client: MerchantClient, account_id: str) -> Response:
    service = _service(container)
    try:
        account = service.get(client.id, account_id)
    except AccountError as error:
        raise _problem(error) from None
    return _answer(account, service.default_for(client.id))


@router.post(
    "/{account_id}",
    summary="Change a connector account (name, credentials)",
    openapi_extra=_body_schema(AccountUpdate),
    response_model=AccountOut,
    responses={200: with_headers("The account", ETag=RESOURCE_ETAG), **_ERRORS},
)
def update_account(
    container: ContainerDep,
    client: MerchantClient,
    account_id: str,
    body: JsonBody,
    if_match: IfMatch = None,
) -> Response:
    payload = parse_model(AccountUpdate, body)
    precondition = _precondition(if_match)
    service = _service(container)
    try:
        account = service.update(
            client.id,
            account_id,
            if_match=precondition,
            name=payload.name,
            credentials=payload.credentials,
        )
    except AccountError as error:
        raise _problem(error) from None
    return _answer(account, service.default_for(client.id))


@router.delete(
    "/{account_id}",
    summary="Disable a connector account (kept for the payments that ran on it)",
    response_model=AccountOut,
    responses={200: with_headers("The account", ETag=RESOURCE_ETAG), **_ERRORS},
)
def disable_account(
    container: ContainerDep, client: MerchantClient, account_id: str, if_match: IfMatch = None
) -> Response:
    precondition = _precondition(if_match)
    service = _service(container)
    try:
        account = service.disable(
            client.id, account_id, if_match=precondition, reason="disabled by the merchant"
        )
    except AccountError as error:
        raise _problem(error) from None
    return _answer(account, service.default_for(client.id))
