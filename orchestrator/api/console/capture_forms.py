"""The console's capture and cancel forms on a payment's page: they call
``operator_capture`` / ``operator_cancel`` (``ops.captures``), exactly what ``POST
/v1/ops/payments/{id}/capture|cancel`` call, under the signed-in ops client, with its
reason in the audit trail; a refusal re-renders the page with the API's own message."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast, get_args

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.capture_schemas import CancellationReason
from orchestrator.api.console.guard import ConsoleUser, CurrentUser, read_form, require_csrf
from orchestrator.api.console.payment_pages import payment_page
from orchestrator.api.console.rendering import redirect
from orchestrator.api.deps import ContainerDep
from orchestrator.api.routes.captures import CANCEL, CAPTURE, REFUSALS, refusal_problem
from orchestrator.bootstrap import Container
from orchestrator.domain.currencies import MAX_AMOUNT
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import OperationKindName
from orchestrator.ops.captures import OperatorOperation, operator_cancel, operator_capture
from orchestrator.ops.errors import InvalidReason

router = APIRouter(prefix="/ops", include_in_schema=False)

CANCELLATION_REASONS: tuple[str, ...] = get_args(CancellationReason)


@router.post("/payments/{payment_id}/capture")
async def capture(
    request: Request, container: ContainerDep, user: CurrentUser, payment_id: str
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    amount_text = form.get("amount", "").strip()
    amount = minor_units(amount_text)
    if amount_text and amount is None:
        return await _refused(request, container, user, payment_id, 400, _BAD_AMOUNT)
    return await _operate(
        request,
        container,
        user,
        payment_id,
        CAPTURE,
        lambda: operator_capture(
            container.uow,
            container.publisher,
            container.settings,
            user.actor,
            payment_id,
            amount=amount,
            reason=form.get("reason", ""),
        ),
    )


@router.post("/payments/{payment_id}/cancel")
async def cancel(
    request: Request, container: ContainerDep, user: CurrentUser, payment_id: str
) -> Response:
    form = await read_form(request)
    require_csrf(user, form)  # before anything is read or changed
    cancellation_reason = form.get("cancellation_reason", "") or None
    if cancellation_reason is not None and cancellation_reason not in CANCELLATION_REASONS:
        return await _refused(request, container, user, payment_id, 400, _BAD_CANCEL_REASON)
    return await _operate(
        request,
        container,
        user,
        payment_id,
        CANCEL,
        lambda: operator_cancel(
            container.uow,
            container.publisher,
            container.settings,
            user.actor,
            payment_id,
            cancellation_reason=cast(CancellationReason | None, cancellation_reason),
            reason=form.get("reason", ""),
        ),
    )


def minor_units(text: str) -> int | None:
    """A positive whole number of minor units typed in a form, or None.

    ``str.isdigit()`` alone is true for "²" and other Unicode digits, which ``int()`` then
    refuses (a 500), and ``int()`` refuses numbers of more than 4300 digits too: only ASCII
    digits, and no more of them than the largest amount has, reach ``int()``."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_AMOUNT)):
        return None
    value = int(text)
    return value if 0 < value <= MAX_AMOUNT else None


_BAD_AMOUNT = "The amount is a whole number of minor units above 0 (or empty: all of it)."
_BAD_CANCEL_REASON = f"The cancellation reason is one of {', '.join(CANCELLATION_REASONS)}."


async def _operate(
    request: Request,
    container: Container,
    user: ConsoleUser,
    payment_id: str,
    kind: OperationKindName,
    command: Callable[[], OperatorOperation],
) -> Response:
    if not is_payment_id(payment_id):
        return await run_in_threadpool(payment_page, request, container, user, payment_id)
    try:
        done = await run_in_threadpool(command)
    except InvalidReason as refused:
        return await _refused(request, container, user, payment_id, 400, refused.message)
    except REFUSALS as refused:
        problem = refusal_problem(refused, payment_id, kind)
        return await _refused(request, container, user, payment_id, problem.status, problem.detail)
    return redirect(f"/ops/payments/{payment_id}?done={done.audit.id}")


async def _refused(
    request: Request,
    container: Container,
    user: ConsoleUser,
    payment_id: str,
    status_code: int,
    message: str,
) -> Response:
    return await run_in_threadpool(
        payment_page,
        request,
        container,
        user,
        payment_id,
        error=message,
        status_code=status_code,
    )
