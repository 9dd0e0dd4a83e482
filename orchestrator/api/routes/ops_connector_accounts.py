"""``/v1/ops/connector_accounts``: every merchant's connector accounts, and disabling one
with a reason (ops keys; audited).  Credentials show as ``…last4`` here too."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.routes.connector_accounts import AccountFields, account_document
from orchestrator.api.routes.ops_circuits import CircuitOut
from orchestrator.api.routes.ops_leases import AuditOut
from orchestrator.domain.circuit import Circuit
from orchestrator.domain.connector_accounts import ConnectorAccount
from orchestrator.engine.takeover import Actor
from orchestrator.ops.circuits import CircuitView, circuit_document, read_circuits
from orchestrator.ops.connector_accounts import AccountNotFound, disable_account, list_accounts
from orchestrator.ops.errors import MAX_REASON_LENGTH, ConcurrentChange, InvalidReason
from orchestrator.ops.lease_documents import audit_representation

router = APIRouter(prefix="/v1/ops/connector_accounts", tags=["ops"])


class DisableRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Annotated[
        str,
        StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON_LENGTH),
        Field(description="Why: recorded in the audit trail.", examples=["key leaked"]),
    ]


class OpsAccountOut(AccountFields):
    """No ``default``: that is the merchant's routing, not the account's own field."""

    client_id: str
    circuit: CircuitOut | None = Field(
        default=None,
        description="The account's circuit (decision 0082; also GET /v1/ops/circuits). "
        "Absent in a disable's answer.",
    )


class OpsAccountList(BaseModel):
    data: list[OpsAccountOut]


class DisableOut(BaseModel):
    account: OpsAccountOut
    audit: AuditOut | None = Field(description="Null: it was disabled already.")


def ops_account_document(account: ConnectorAccount) -> dict[str, Any]:
    # ``default`` is the merchant's view; ops reads the account's own fields.
    document = account_document(account, default=False)
    document.pop("default")
    return {"client_id": account.client_id, **document}


@router.get(
    "",
    summary="List every merchant's connector accounts",
    response_model=OpsAccountList,
    responses=AUTH_ERRORS,
)
def get_accounts(
    container: ContainerDep,
    _client: OpsClient,
    client_id: Annotated[
        str | None, Query(max_length=40, description="Only this merchant's (cli_…).")
    ] = None,
) -> Response:
    accounts = list_accounts(container.read_only_uow, client_id=client_id)
    with container.read_only_uow() as uow:
        circuits = {view.circuit.key: view for view in read_circuits(uow)}
    documents = []
    for account in accounts:
        view = circuits.get(account.id) or CircuitView(Circuit(key=account.id), 0)
        circuit = circuit_document(view)["circuit"]
        documents.append({**ops_account_document(account), "circuit": circuit})
    return JSONResponse({"data": documents})


@router.post(
    "/{account_id}/disable",
    summary="Disable a connector account (audited; its payments in flight keep it)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": DisableRequest.model_json_schema()}},
        }
    },
    response_model=DisableOut,
    responses={
        400: problem("Missing reason or invalid body"),
        404: problem("No such connector account"),
        409: problem("Changed concurrently; try again"),
        **AUTH_ERRORS,
    },
)
def post_disable(
    container: ContainerDep, client: OpsClient, account_id: str, body: JsonBody
) -> Response:
    payload = parse_model(DisableRequest, body)
    try:
        done = disable_account(
            container.uow,
            Actor.operator(client.id, client.name),
            account_id,
            reason=payload.reason,
        )
    except AccountNotFound:
        raise Problem(404, "not-found", "No such connector account exists.") from None
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    except ConcurrentChange as error:
        raise Problem(409, "conflict", error.message) from None
    return JSONResponse(
        {
            "account": ops_account_document(done.account),
            "audit": None if done.audit is None else audit_representation(done.audit),
        }
    )
