"""``GET /v1/ops/circuits``: connector accounts' circuits (decision 0082), with the payments
waiting each one out.  The same entries are ``connectors[]`` in ``GET /v1/ops/status``."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from orchestrator.api.deps import ContainerDep, OpsClient
from orchestrator.api.responses import AUTH_ERRORS
from orchestrator.ops.circuits import circuit_document, read_circuits

router = APIRouter(prefix="/v1/ops/circuits", tags=["ops"])


class CircuitOut(BaseModel):
    state: Literal["closed", "open", "half_open"] = Field(
        description="closed: calls go through; open: no call is made and the account's "
        "payments wait (no attempt spent); half_open: a few probe calls decide."
    )
    since: str | None = Field(description="When it entered this state; null: never left closed.")
    failures: int = Field(
        description="Provider failures counted: in the current window while closed, since "
        "it opened otherwise."
    )
    opened_at: str | None = Field(description="When it last opened.")
    next_probe_at: str | None = Field(
        description="When an open circuit lets its first probe through; null when closed."
    )
    waiting_payments: int = Field(
        description="Payments waiting out this circuit (no lease, no message): the sweeper "
        "releases them when it half-opens (probes) or closes (oldest first, at "
        "CIRCUIT_RESUME_PER_SECOND)."
    )


class ConnectorCircuitOut(BaseModel):
    id: str = Field(description="The connector account (ca_platform_stripe: the platform's).")
    circuit: CircuitOut


class CircuitList(BaseModel):
    data: list[ConnectorCircuitOut]


@router.get(
    "",
    summary="Connector accounts' circuits",
    response_model=CircuitList,
    responses=AUTH_ERRORS,
)
def get_circuits(container: ContainerDep, _client: OpsClient) -> JSONResponse:
    with container.read_only_uow() as uow:
        views = read_circuits(uow)
    return JSONResponse({"data": [circuit_document(view) for view in views]})
