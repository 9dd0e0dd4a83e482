"""Dependencies of the routes, as ``Annotated`` aliases in one place."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.api.body import read_json_body, read_optional_json_body
from orchestrator.api.problems import Problem
from orchestrator.api.role_problems import not_a_merchant, not_an_operator
from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, Role
from orchestrator.services.api_keys import authenticate

IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7E]+$"


# async: a plain attribute read needs no thread (a sync dependency costs a thread hop).
async def get_container(request: Request) -> Container:
    container: Container = request.app.state.container
    return container


ContainerDep = Annotated[Container, Depends(get_container)]

_bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <api key>`")


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


def current_client(
    request: Request,
    container: ContainerDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiClient:
    if credentials is None:
        raise _unauthorized("Send 'Authorization: Bearer <api key>'.")
    client = authenticate(container.lookup_uow, credentials.credentials)
    if client is None:
        raise _unauthorized("The API key is unknown or revoked.")
    request.state.client_id = client.id
    structlog.contextvars.bind_contextvars(client_id=client.id)
    return client


# The role checks are async: pure checks need no thread (a sync dependency is one more
# thread hop per request, measurable on the accept path).
async def merchant_client(
    request: Request, client: Annotated[ApiClient, Depends(current_client)]
) -> ApiClient:
    if client.role is not Role.MERCHANT:
        raise not_a_merchant(request)
    return client


async def ops_client(
    request: Request, client: Annotated[ApiClient, Depends(current_client)]
) -> ApiClient:
    if client.role is not Role.OPS:
        raise not_an_operator(request)
    return client


MerchantClient = Annotated[ApiClient, Depends(merchant_client)]
OpsClient = Annotated[ApiClient, Depends(ops_client)]
JsonBody = Annotated[Any, Depends(read_json_body)]
# A body whose every field is optional: no body at all is ``{}``.
OptionalJsonBody = Annotated[Any, Depends(read_optional_json_body)]

IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Required. 1-255 printable ASCII characters, unique per logical payment and "
            "per API client. Retries with the same key and the same body return the "
            "same payment; the same key with a different body is refused (422). Keys are "
            "kept for PAYORCH_IDEMPOTENCY_RETENTION_HOURS (default 24 h) after the "
            "payment was created and finished; after that the key may start a new "
            "payment."
        ),
    ),
]
