"""``payorch leases``: list leases by state, take one over."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.ops_output import IfMatchOption, fail, parse_if_match, print_action
from orchestrator.cli.output import Column, WideFlag, print_json, print_table
from orchestrator.domain.lease_state import LeaseState, lease_state_of
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.commands import take_over_payment
from orchestrator.ops.errors import OpsError
from orchestrator.ops.lease_documents import lease_representation
from orchestrator.ops.lease_reads import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, list_leases

app = typer.Typer(help="Payment leases: list them, take one over.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ReasonOption = Annotated[
    str, typer.Option("--reason", help="Why (recorded in the audit trail).", show_default=False)
]

# The table is for people at a terminal: the lease state says what status, lease_expired
# and next_attempt_at say in three columns (--json has every field).  At 80 columns the
# first four fit on one line per row; the extras are hidden from the right (etag first)
# until the rest fit (orchestrator.cli.output), and --wide shows them all.
_COLUMNS = [
    Column("kind"),
    Column("payment_id", id=True),
    Column("lease"),
    Column("attempts"),
    Column("operation_id", id=True, extra=True),
    Column("recovery_point", extra=True),
    Column("lease_state", extra=True),
    Column("lease_owner", extra=True),
    Column("lease_token", extra=True),
    Column("locked_until", extra=True),
    Column("last_error", extra=True),
    Column("etag", extra=True),
]
_MAX_ERROR_WIDTH = 60


@app.command("list")
def list_command(
    state: Annotated[
        LeaseState,
        typer.Option(
            help="unfinished: every payment not finished; active: a worker holds a live "
            "lease; deferred: waiting for a stored retry time, nobody holds it; expired: "
            "the sweeper's next work; needs_attention: parked for an operator."
        ),
    ] = LeaseState.UNFINISHED,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """List unfinished payments and their leases (all of them by default, or one --state)."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    listing = list_leases(container.read_only_uow, state, limit=limit)
    leases = [lease_representation(r, listing.now) for r in listing.records]
    if as_json:
        print_json({"state": listing.state.value, "now": listing.now.isoformat(), "data": leases})
        return
    rows = []
    for record, lease in zip(listing.records, leases, strict=True):
        error = lease["last_error"] or ""
        current = lease_state_of(record, listing.now)
        lease = {
            **lease,
            "lease": current.value if current is not None else "-",
            "last_error": error[:_MAX_ERROR_WIDTH],
        }
        rows.append([lease[column.name] for column in _COLUMNS])
    title = f"{state.value} leases at {listing.now.isoformat()}"
    print_table(title, _COLUMNS, rows, wide=wide)


@app.command()
def takeover(
    payment_id: str,
    reason: ReasonOption,
    force: Annotated[
        bool, typer.Option("--force", help="Also take a lease that has not expired.")
    ] = False,
    operator: OperatorOption = None,
    if_match: IfMatchOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Fence out the lease holder (new lease token) and re-queue the work; audited."""
    actor = cli_operator(operator)
    precondition = parse_if_match(if_match)
    container = bootstrap(load_settings())
    try:
        action = take_over_payment(
            container.uow,
            container.publisher,
            container.settings,
            actor,
            payment_id,
            reason=reason,
            force=force,
            if_match=precondition,
        )
    except OpsError as error:
        fail(error, as_json=as_json)
    print_action(action, as_json=as_json)
