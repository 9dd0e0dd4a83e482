"""``payorch leases``: list leases by state, take one over."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.ops_output import fail, print_action
from orchestrator.cli.output import print_json, print_table
from orchestrator.cli.serve import load_settings
from orchestrator.db.repositories.leases import LeaseState
from orchestrator.ops.commands import take_over_payment
from orchestrator.ops.errors import OpsError
from orchestrator.ops.queries import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, list_leases
from orchestrator.ops.representation import lease_representation
from orchestrator.services.dispatch import NullPublisher

app = typer.Typer(help="Payment leases: list them, take one over.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ReasonOption = Annotated[
    str, typer.Option("--reason", help="Why (recorded in the audit trail).", show_default=False)
]

_COLUMNS = [
    "payment_id",
    "status",
    "recovery_point",
    "lease_state",
    "lease_owner",
    "lease_token",
    "locked_until",
    "lease_expired",
    "next_attempt_at",
    "attempts",
    "last_error",
]
_MAX_ERROR_WIDTH = 60


@app.command("list")
def list_command(
    state: Annotated[LeaseState, typer.Option(help="Which leases.")] = LeaseState.EXPIRED,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    as_json: JsonFlag = False,
) -> None:
    """List payments whose lease is expired or active, or that need attention."""
    listing = list_leases(bootstrap(load_settings(), publisher=NullPublisher()), state, limit=limit)
    leases = [lease_representation(r, listing.now) for r in listing.records]
    if as_json:
        print_json({"state": listing.state.value, "now": listing.now.isoformat(), "data": leases})
        return
    rows = []
    for lease in leases:
        error = lease["last_error"] or ""
        lease = {**lease, "last_error": error[:_MAX_ERROR_WIDTH]}
        rows.append([lease[column] for column in _COLUMNS])
    print_table(f"{state.value} leases at {listing.now.isoformat()}", _COLUMNS, rows)


@app.command()
def takeover(
    payment_id: str,
    reason: ReasonOption,
    force: Annotated[
        bool, typer.Option("--force", help="Also take a lease that has not expired.")
    ] = False,
    operator: OperatorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Fence out the lease holder (new lease token) and re-queue the work; audited."""
    actor = cli_operator(operator)
    container = bootstrap(load_settings())
    try:
        action = take_over_payment(container, actor, payment_id, reason=reason, force=force)
    except OpsError as error:
        fail(error, as_json=as_json)
    print_action(action, as_json=as_json)
