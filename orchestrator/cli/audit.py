"""``payorch audit``: the audit trail of operator actions."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import Column, WideFlag, print_json, print_table
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.lease_documents import audit_representation
from orchestrator.ops.lease_reads import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, list_audit

app = typer.Typer(help="The audit trail of operator actions.", no_args_is_help=True)

# At 80 columns the subject and the action fit on one line per entry; the extras are
# hidden from the right until the rest fit (orchestrator.cli.output), and --wide shows
# them all.
_COLUMNS = [
    Column("payment_id", id=True),
    Column("action"),
    Column("created_at", extra=True),
    Column("actor_name", extra=True),
    Column("reason", extra=True),
    Column("old_token", extra=True),
    Column("new_token", extra=True),
    Column("actor_client_id", id=True, extra=True),
    Column("id", extra=True),
]


@app.command("list")
def list_command(
    payment_id: Annotated[
        str | None, typer.Option("--payment-id", help="Only this payment's entries.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    wide: WideFlag = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Who did what to which payment, when and why (newest first)."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    entries = [
        audit_representation(e)
        for e in list_audit(container.read_only_uow, payment_id=payment_id, limit=limit)
    ]
    if as_json:
        print_json({"data": entries})
        return
    rows = [[e[c.name] for c in _COLUMNS] for e in entries]
    print_table("audit trail", _COLUMNS, rows, wide=wide)
