"""``/v1/ops/clients/{client_id}/keys``: a client's API keys — list them, issue another,
revoke one (ops keys; issuing and revoking audited with a reason).  A key is answered
whole once, by the request that made it; lists show its first characters only."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.ops_leases import AuditOut
from orchestrator.domain.encoding import iso
from orchestrator.domain.model import ApiKey
from orchestrator.engine.takeover import Actor
from orchestrator.ops.api_keys import (
    ClientNotFound,
    KeyNotFound,
    issue_client_key,
    list_keys,
    revoke_client_key,
)
from orchestrator.ops.errors import MAX_REASON_LENGTH, InvalidReason
from orchestrator.ops.lease_documents import audit_representation

router = APIRouter(prefix="/v1/ops/clients/{client_id}/keys", tags=["ops"])


class KeyChangeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON_LENGTH),
        Field(description="Why: recorded in the audit trail.", examples=["yearly rotation"]),
    ]


class KeyOut(BaseModel):
    id: str = Field(examples=["key_5f0c9a0e2b7d4c1a8e3f6b20"])
    client_id: str
    key_prefix: str = Field(description="The key's first 12 characters, to tell keys apart.")
    created_at: str
    revoked_at: str | None = Field(description="Null: the key authenticates.")


class KeyList(BaseModel):
    data: list[KeyOut]


class IssuedKeyOut(BaseModel):
    key: KeyOut
    api_key: str = Field(description="The key itself: shown this once, never again.")
    audit: AuditOut


class RevokedKeyOut(BaseModel):
    key: KeyOut
    audit: AuditOut | None = Field(description="Null: it was revoked already.")


def key_document(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "client_id": key.client_id,
        "key_prefix": key.key_prefix,
        "created_at": iso(key.created_at),
        "revoked_at": iso(key.revoked_at) if key.revoked_at else None,
    }


_REASON_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": KeyChangeRequest.model_json_schema()}},
    }
}


@router.get(
    "",
    summary="List a client's API keys",
    response_model=KeyList,
    responses={404: problem("No such client"), **AUTH_ERRORS},
)
def get_keys(container: ContainerDep, _client: OpsClient, client_id: str) -> Response:
    try:
        keys = list_keys(container.read_only_uow, client_id)
    except ClientNotFound:
        raise Problem(404, "not-found", "No such API client exists.") from None
    return JSONResponse({"data": [key_document(k) for k in keys]})


@router.post(
    "",
    status_code=201,
    summary="Issue another API key for a client (audited; its other keys keep working)",
    openapi_extra=_REASON_BODY,
    response_model=IssuedKeyOut,
    responses={
        400: problem("Missing reason or invalid body"),
        404: problem("No such active client"),
        **AUTH_ERRORS,
    },
)
def post_key(
    container: ContainerDep, client: OpsClient, client_id: str, body: JsonBody
) -> Response:
    payload = parse_model(KeyChangeRequest, body)
    try:
        done = issue_client_key(
            container.uow, Actor.operator(client.id, client.name), client_id, reason=payload.reason
        )
    except ClientNotFound:
        raise Problem(404, "not-found", "No such active API client exists.") from None
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    key = done.issued.key
    assert key is not None
    return JSONResponse(
        {
            "key": key_document(key),
            "api_key": done.issued.api_key,
            "audit": audit_representation(done.audit),
        },
        status_code=201,
        # The key is in this body and nowhere else: no cache may keep a copy.
        headers={"Cache-Control": "no-store"},
    )


@router.post(
    "/{key_id}/revoke",
    summary="Revoke one of a client's API keys (audited; the next request with it is 401)",
    openapi_extra=_REASON_BODY,
    response_model=RevokedKeyOut,
    responses={
        400: problem("Missing reason or invalid body"),
        404: problem("No such key for this client"),
        **AUTH_ERRORS,
    },
)
def post_revoke(
    container: ContainerDep, client: OpsClient, client_id: str, key_id: str, body: JsonBody
) -> Response:
    payload = parse_model(KeyChangeRequest, body)
    try:
        done = revoke_client_key(
            container.uow,
            Actor.operator(client.id, client.name),
            client_id,
            key_id,
            reason=payload.reason,
        )
    except KeyNotFound:
        raise Problem(404, "not-found", "This API client has no such key.") from None
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    return JSONResponse(
        {
            "key": key_document(done.key),
            "audit": None if done.audit is None else audit_representation(done.audit),
        }
    )
