"""The console's connector accounts: every merchant's accounts (provider, name, status,
``…last4`` credentials) with a disable form, which calls ``disable_account``
(``ops.connector_accounts``), what ``POST /v1/ops/connector_accounts/{id}/disable`` calls.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.console.guard import ConsoleUser, CurrentUser, read_form, require_csrf
from orchestrator.api.console.rendering import redirect, render_page
from orchestrator.api.deps import ContainerDep
from orchestrator.bootstrap import Container
from orchestrator.ops.connector_accounts import AccountNotFound, disable_account, list_accounts
from orchestrator.ops.errors import OpsError

router = APIRouter(prefix="/ops", include_in_schema=False)


def _accounts_page(
    request: Request,
    container: Container,
    user: ConsoleUser,
    *,
    done: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    accounts = list_accounts(container.read_only_uow)
    return render_page(
        request,
        "connectors.html",
        user,
        status_code=status_code,
        page="connectors",
        accounts=accounts,
        done=done,
        error=error,
    )


@router.get("/connectors")
def connectors(
    request: Request, container: ContainerDep, user: CurrentUser, done: str | None = None
) -> Response:
    return _accounts_page(request, container, user, done=done)


@router.post("/connectors/{account_id}/disable")
async def disable(
    request: Request, container: ContainerDep, user: CurrentUser, account_id: str
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    try:
        done = await run_in_threadpool(
            disable_account, container.uow, user.actor, account_id, reason=form.get("reason", "")
        )
    except AccountNotFound:
        return await run_in_threadpool(
            _accounts_page,
            request,
            container,
            user,
            error="No such connector account.",
            status_code=404,
        )
    except OpsError as refused:
        return await run_in_threadpool(
            _accounts_page, request, container, user, error=refused.message, status_code=400
        )
    return redirect(f"/ops/connectors?done={done.account.id}")
