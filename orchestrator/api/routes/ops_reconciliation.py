"""``/v1/ops/reconciliation``: reconciliation runs with their findings, and the action that
marks a finding explained (decision 0092).  Ops keys only; a merchant's key gets 403."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from orchestrator.api.body import parse_model
from orchestrator.api.deps import ContainerDep, JsonBody, OpsClient
from orchestrator.api.problems import Problem
from orchestrator.api.responses import AUTH_ERRORS, problem
from orchestrator.api.schemas import FreeText
from orchestrator.domain.reconciliation_records import FINDING_ID_PATTERN, RUN_ID_PATTERN
from orchestrator.ops.errors import MAX_REASON_LENGTH, InvalidReason, OpsError
from orchestrator.ops.reconciliation import (
    FindingAlreadyResolved,
    FindingNotFound,
    explain_finding,
    finding_document,
    read_run,
    run_document,
    run_summary,
)

router = APIRouter(prefix="/v1/ops/reconciliation", tags=["ops"])

_RUN_ID = re.compile(RUN_ID_PATTERN)
_FINDING_ID = re.compile(FINDING_ID_PATTERN)
FindingKindName = Literal[
    "orphan_at_provider",
    "missing_at_provider",
    "amount_mismatch",
    "status_mismatch",
    "refund_mismatch",
    "ledger_imbalance",
]


class WindowOut(BaseModel):
    since: str = Field(description="Provider objects created at or after this (ISO 8601).")
    until: str = Field(description="... and at or before this.")


class CountsOut(BaseModel):
    payments_seen: int = Field(description="Provider payments listed in the window.")
    refunds_seen: int = Field(description="Provider refunds listed in the window.")
    matched: int = Field(description="Provider objects that agree with payorch.")
    foreign: int = Field(
        description="Provider objects without payorch's reference (not ours): never a finding."
    )
    in_flight: int = Field(
        description="Objects whose payorch side is still processing: a later run compares them."
    )
    findings_new: int = Field(description="Findings this run created.")
    findings_seen_again: int = Field(
        description="Findings an earlier run created that this run saw again (not new)."
    )
    pages: int = Field(description="Pages read (provider lists and payorch's own side).")


class SideOut(BaseModel):
    id: str | None
    status: str
    amount: int | None
    currency: str | None


class ResolutionOut(BaseModel):
    status: Literal["open", "resolved"]
    reason: str | None
    by: str | None = Field(description="The ops client that resolved it.")
    at: str | None


class FindingOut(BaseModel):
    id: str
    kind: FindingKindName
    connector_account: str
    object_type: Literal["payment", "refund", "ledger"]
    provider_object_id: str = Field(
        description=(
            "The provider's object (for missing_at_provider: the id payorch recorded; for "
            "ledger_imbalance, which has no provider side: the payment and currency, "
            "pay_…/usd)."
        )
    )
    payment_id: str | None
    operation_id: str | None = Field(description="The refund (rfd_…) a refund finding names.")
    ours: SideOut | None = Field(description="payorch's side; null: payorch has none.")
    theirs: SideOut | None = Field(description="The provider's side; null: it has none.")
    first_run_id: str
    last_run_id: str
    resolution: ResolutionOut
    created_at: str


class RunSummaryOut(BaseModel):
    id: str
    connector_account: str = Field(description="ca_…; the platform's own: ca_platform_stripe.")
    provider: str
    window: WindowOut
    status: Literal["running", "completed", "failed"] = Field(
        description="running: in progress, or interrupted and resumable from its cursor."
    )
    phase: Literal["payments", "refunds", "balance", "ours", "done"]
    counts: CountsOut
    ledger_balanced: bool | None = Field(
        description=(
            "Every currency's ledger lines sum to zero, and every payment's of this account "
            "(none is a ledger_imbalance finding); null until the run completes."
        )
    )
    ledger_sums: dict[str, int] | None = Field(description="Per currency, the ledger's sum.")
    error: str | None
    started_at: str
    finished_at: str | None


class RunOut(RunSummaryOut):
    findings: list[FindingOut] = Field(description="The findings this run saw, open or not.")


class RunList(BaseModel):
    data: list[RunSummaryOut]


Reason = Annotated[
    FreeText,
    StringConstraints(min_length=1, max_length=MAX_REASON_LENGTH),
    Field(description="Why it is explained: recorded on the finding and in the audit trail."),
]


class ExplainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: Reason


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


@router.get(
    "/runs",
    summary="Reconciliation runs, newest first",
    response_model=RunList,
    responses={400: problem("The limit is out of range"), **AUTH_ERRORS},
)
def get_runs(
    container: ContainerDep,
    _client: OpsClient,
    limit: Annotated[int, Query(ge=1, le=100, description="How many runs.")] = 20,
) -> JSONResponse:
    with container.read_only_uow() as uow:
        runs = uow.reconciliation.runs(limit=limit)
    return JSONResponse({"data": [run_summary(run) for run in runs]})


@router.get(
    "/runs/{run_id}",
    summary="A reconciliation run with its findings",
    response_model=RunOut,
    responses={404: problem("No such run"), **AUTH_ERRORS},
)
def get_run(container: ContainerDep, _client: OpsClient, run_id: str) -> JSONResponse:
    if _RUN_ID.fullmatch(run_id) is None:
        raise Problem(404, "not-found", "No such reconciliation run exists (ids are rcn_…).")
    with container.read_only_uow() as uow:
        view = read_run(uow, run_id)
    if view is None:
        raise Problem(404, "not-found", "No such reconciliation run exists.")
    return JSONResponse(run_document(view))


@router.post(
    "/findings/{finding_id}/explain",
    summary="Mark a finding explained (resolved, with a reason; audited)",
    openapi_extra=_body_schema(ExplainRequest),
    response_model=FindingOut,
    responses={
        200: {"description": "Resolved; later runs keep it resolved"},
        400: problem("The body is not valid JSON or misses a reason"),
        404: problem("No such finding"),
        409: problem("The finding is already resolved"),
        413: problem("Body larger than 64 KiB"),
        415: problem("Body is not application/json"),
        **AUTH_ERRORS,
    },
)
def post_explain(
    container: ContainerDep, client: OpsClient, finding_id: str, body: JsonBody
) -> JSONResponse:
    payload = parse_model(ExplainRequest, body)
    if _FINDING_ID.fullmatch(finding_id) is None:
        raise Problem(404, "not-found", "No such finding exists (ids are rcf_…).")
    try:
        finding = explain_finding(
            container.uow,
            finding_id,
            reason=payload.reason,
            actor_id=client.id,
            actor_name=client.name,
        )
    except InvalidReason as error:
        raise Problem(400, "invalid-request", error.message) from None
    except FindingNotFound as error:
        raise Problem(404, "not-found", error.message) from None
    except FindingAlreadyResolved as error:
        raise Problem(409, "conflict", error.message) from None
    except OpsError as error:
        raise Problem(409, "conflict", error.message) from None
    return JSONResponse(finding_document(finding))
