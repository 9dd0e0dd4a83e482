"""The console's reconciliation: the runs (newest first) and a page per run with each
finding, both sides, and the form that marks an open finding explained, which calls
``explain_finding`` (``ops.reconciliation``), what
``POST /v1/ops/reconciliation/findings/{id}/explain`` calls (decision 0092)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.console.guard import ConsoleUser, CurrentUser, read_form, require_csrf
from orchestrator.api.console.rendering import redirect, render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.ops.errors import OpsError
from orchestrator.ops.reconciliation import FindingNotFound, explain_finding, read_run

router = APIRouter(prefix="/ops", include_in_schema=False)

# Runs the list page shows.
RUNS_SHOWN = 50


@router.get("/reconciliation")
def runs(request: Request, container: ContainerDep, user: CurrentUser) -> Response:
    with container.read_only_uow() as uow:
        listed = uow.reconciliation.runs(limit=RUNS_SHOWN)
    return render_page(request, "reconciliation.html", user, page="reconciliation", runs=listed)


def _run_page(
    request: Request,
    container: Container,
    user: ConsoleUser,
    run_id: str,
    *,
    done: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    with container.read_only_uow() as uow:
        view = read_run(uow, run_id)
    return render_page(
        request,
        "reconciliation_run.html",
        user,
        status_code=404 if view is None else status_code,
        page="reconciliation",
        run=view.run if view else None,
        findings=view.findings if view else (),
        done=done,
        error=error,
    )


@router.get("/reconciliation/{run_id}")
def run(
    request: Request,
    container: ContainerDep,
    user: CurrentUser,
    run_id: str,
    done: str | None = None,
) -> Response:
    return _run_page(request, container, user, run_id, done=done)


@router.post("/reconciliation/{run_id}/findings/{finding_id}/explain")
async def explain(
    request: Request, container: ContainerDep, user: CurrentUser, run_id: str, finding_id: str
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    actor = user.actor
    try:
        await run_in_threadpool(
            explain_finding,
            container.uow,
            finding_id,
            reason=form.get("reason", ""),
            actor_id=actor.client_id,
            actor_name=actor.name,
        )
    except FindingNotFound as missing:
        return await run_in_threadpool(
            _run_page, request, container, user, run_id, error=missing.message, status_code=404
        )
    except OpsError as refused:
        return await run_in_threadpool(
            _run_page, request, container, user, run_id, error=refused.message, status_code=400
        )
    return redirect(f"/ops/reconciliation/{run_id}?done={finding_id}")
