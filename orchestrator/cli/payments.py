"""``payorch payments``: what an operator does and reads about payments.

Commands (``retry``, one payment or in bulk with ``--status``, and ``sync-refunds``) are
audited ops commands; ``show`` and ``list`` are
reads, as tables for people and ``--json`` for scripts (the same bodies as
``GET /v1/ops/payments/{id}`` and ``GET /v1/ops/payments``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.bulk_retry import run_bulk_retry_command
from orchestrator.cli.config import load_settings
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.ops_output import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    IfMatchOption,
    fail,
    parse_if_match,
    print_action,
)
from orchestrator.cli.output import Column, WideFlag, errors, print_json, print_table
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.payment_filters import PaymentFilters
from orchestrator.domain.states import PaymentStatus
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.commands import retry_payment
from orchestrator.ops.errors import InvalidCursor, OpsError
from orchestrator.ops.payment_documents import (
    payment_detail_representation,
    payment_page_representation,
)
from orchestrator.ops.payment_reads import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    get_payment_detail,
    list_payments,
)
from orchestrator.ops.refund_sync import sync_payment_refunds

app = typer.Typer(help="Operator commands on payments.", no_args_is_help=True)


@app.command()
def retry(
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded in the audit trail).", show_default=False)
    ],
    payment_id: Annotated[
        str | None,
        typer.Argument(
            help="The payment (pay_…) or operation (rfd_…, cap_…) to retry; or --status.",
            show_default=False,
        ),
    ] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="Retry every payment in this status instead of one: needs_attention.",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="With --status: only those parked at or after this time (ISO 8601 with a "
            "zone, e.g. 2026-12-05T14:00:00Z).",
            show_default=False,
        ),
    ] = None,
    connector: Annotated[
        str | None,
        typer.Option(
            "--connector",
            help="With --status: only those on this connector account (ca_…; "
            "ca_platform_stripe: the platform's own).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="With --status: list what would be retried; change nothing."
        ),
    ] = False,
    operator: OperatorOption = None,
    if_match: IfMatchOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Re-queue a needs_attention payment with fresh attempts, from where it stopped; with
    --status needs_attention, every parked payment (one audit row each)."""
    actor = cli_operator(operator)
    # Configuration first, as every command: a broken environment is the one line that
    # matters, before any complaint about the arguments.
    settings = load_settings()
    _check_retry_form(payment_id, status, since, connector, dry_run, if_match)
    if payment_id is None:
        assert status is not None
        run_bulk_retry_command(
            actor,
            status=status,
            since=since,
            connector=connector,
            reason=reason,
            dry_run=dry_run,
            as_json=as_json,
        )
        return
    precondition = parse_if_match(if_match)
    container = bootstrap(settings)
    try:
        action = retry_payment(
            container.uow,
            container.publisher,
            container.settings,
            actor,
            payment_id,
            reason=reason,
            if_match=precondition,
        )
    except OpsError as error:
        fail(error, as_json=as_json)
    print_action(action, as_json=as_json)


def _check_retry_form(
    payment_id: str | None,
    status: str | None,
    since: str | None,
    connector: str | None,
    dry_run: bool,
    if_match: str | None,
) -> None:
    """One payment by its id, or the bulk form with --status: never both, never neither."""
    problem = None
    if payment_id is None and status is None:
        problem = (
            "Give a payment id to retry one payment, or --status needs_attention to retry "
            "parked payments in bulk."
        )
    elif payment_id is not None and status is not None:
        problem = "Give a payment id or --status, not both."
    elif payment_id is not None and (since is not None or connector is not None or dry_run):
        problem = "--since, --connector and --dry-run go with --status, not with a payment id."
    elif status is not None and if_match is not None:
        problem = (
            "--if-match is for one payment; a bulk retry checks each payment's lease "
            "against what it listed."
        )
    if problem is not None:
        errors.print(problem)
        raise typer.Exit(EXIT_INVALID)


@app.command("sync-refunds")
def sync_refunds(
    payment_id: str,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded in the audit trail).", show_default=False)
    ],
    operator: OperatorOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Read the payment's refunds at the provider again and record any made outside payorch
    (Stripe's Dashboard) whose event was lost.  Queued for the sweeper; nothing is sent
    here."""
    actor = cli_operator(operator)
    container = bootstrap(load_settings())
    try:
        queued = sync_payment_refunds(container.uow, actor, payment_id, reason=reason)
    except OpsError as error:
        fail(error, as_json=as_json)
    data = {
        "id": queued.sync.id,
        "object": "refund_sync",
        "payment_id": queued.sync.payment_id,
        "status": queued.sync.status.value,
        "queued": queued.created,
        "audit_id": queued.audit.id,
    }
    if as_json:
        print_json(data)
        return
    print_table(
        f"sync_refunds: {payment_id}",
        ["sync", "status", "new", "audit id", "operator"],
        [
            [
                data["id"],
                data["status"],
                "yes" if queued.created else "no (already queued)",
                queued.audit.id,
                queued.audit.actor_name,
            ]
        ],
    )


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
_MAX_CELL = 60


def _reader() -> UnitOfWorkFactory:
    # Reads publish nothing: no broker connection for a CLI that only looks.
    return bootstrap(load_settings(), publisher=NullPublisher()).read_only_uow


def _cell(value: Any) -> Any:
    text = "" if value is None else str(value)
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def show(payment_id: str, as_json: JsonFlag = False) -> None:
    """One payment with its lease, provider calls, lease history, audit rows and events."""
    detail = get_payment_detail(_reader(), payment_id)
    if detail is None:
        if as_json:
            print_json({"error": "not_found", "detail": f"No payment {payment_id!r} exists."})
        errors.print(f"No payment {payment_id!r} exists.")
        raise typer.Exit(EXIT_NOT_FOUND)
    data = payment_detail_representation(detail)
    if as_json:
        print_json(data)
        return
    # The charge first; operations after it (refunds) get their own table below.
    payment, operation = data["payment"], data["operations"][0]
    print_table(
        f"payment {payment['id']}",
        ["field", "value"],
        [
            ["status", payment["status"]],
            ["amount", f"{payment['amount']} {payment['currency']}"],
            ["merchant", payment["client_id"]],
            ["idempotency key", payment["idempotency_key"]],
            ["customer reference", payment["customer_reference"]],
            ["description", _cell(payment["description"])],
            ["provider payment", payment["provider_payment_id"]],
            ["failure", _cell(payment["failure"])],
            ["recovery point", operation["recovery_point"]],
            ["lease", f"{operation['lease_state']} (token {operation['lease_token']})"],
            ["lease owner", operation["lease_owner"]],
            ["locked until", operation["locked_until"]],
            ["attempts", f"{operation['attempts']} ({operation['unknown_outcomes']} unknown)"],
            ["last error", _cell(operation["last_error"])],
            ["created", payment["created_at"]],
            ["completed", payment["completed_at"]],
        ],
    )
    _rows(
        "operations after the charge",
        data["operations"][1:],
        ["kind", "operation_id", "status", "amount", "lease_state", "attempts"],
        extra=("provider_object_id", "last_error"),
    )
    _rows(
        "provider calls",
        data["provider_calls"],
        ["created_at", "method", "path", "idempotency_key", "outcome", "provider_status"],
        extra=("latency_ms", "error"),
    )
    _rows(
        "lease history",
        data["lease_history"],
        ["created_at", "event", "owner", "lease_token", "locked_until", "recovery_point"],
    )
    _rows(
        "audit",
        data["audit"],
        ["id", "created_at", "actor_name", "action", "old_token", "new_token", "reason"],
    )
    _rows("events", data["events"], ["id", "type", "created_at", "published_at"])


def _rows(
    title: str, items: list[dict[str, Any]], columns: list[str], extra: tuple[str, ...] = ()
) -> None:
    if not items:
        return
    all_columns = [*columns, *extra]
    print_table(title, all_columns, [[_cell(i[c]) for c in all_columns] for i in items])


# At 80 columns the first four fit on one line per row; the extras are hidden from the
# right until the rest fit (orchestrator.cli.output), and --wide shows them all.
_LIST_COLUMNS = [
    Column("id", id=True),
    Column("status"),
    Column("amount"),
    Column("currency"),
    Column("created_at", extra=True),
    Column("client_id", id=True, extra=True),
    Column("customer_reference", extra=True),
    Column("idempotency_key", extra=True),
]


def list_command(
    status: Annotated[
        PaymentStatus | None,
        # The choices in the help text, where they wrap: as the metavar they made one
        # 98-character line at 80 columns.
        typer.Option(
            metavar="STATUS",
            help=f"Only this status: {', '.join(s.value for s in PaymentStatus)}.",
            show_default=False,
        ),
    ] = None,
    client_id: Annotated[str | None, typer.Option("--client-id", help="One merchant.")] = None,
    customer_reference: Annotated[str | None, typer.Option("--customer-reference")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    created_after: Annotated[
        datetime | None, typer.Option("--created-after", help="Inclusive, UTC when no zone.")
    ] = None,
    created_before: Annotated[
        datetime | None, typer.Option("--created-before", help="Exclusive, UTC when no zone.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page.")] = None,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Every client's payments, newest first (a page; follow next_cursor for more)."""
    filters = PaymentFilters(
        status=status,
        client_id=client_id,
        customer_reference=customer_reference,
        idempotency_key=idempotency_key,
        created_after=_utc(created_after),
        created_before=_utc(created_before),
    )
    try:
        page = list_payments(_reader(), filters, limit=limit, cursor=cursor)
    except InvalidCursor as error:
        if as_json:
            print_json({"error": "invalid", "detail": error.message})
        errors.print(error.message)
        raise typer.Exit(EXIT_INVALID) from None
    data = payment_page_representation(page)
    if as_json:
        print_json(data)
        return
    print_table(
        f"payments ({len(data['data'])})",
        _LIST_COLUMNS,
        [[_cell(p[c.name]) for c in _LIST_COLUMNS] for p in data["data"]],
        wide=wide,
    )
    if data["next_cursor"]:
        errors.print(f"more: --cursor {data['next_cursor']}")


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


app.command("show")(show)
app.command("list")(list_command)
