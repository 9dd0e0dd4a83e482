"""``payorch audit``: the audit trail of operator actions."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import print_json, print_table
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.lease_documents import audit_representation
from orchestrator.ops.lease_reads import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, list_audit

app = typer.Typer(help="The audit trail of operator actions.", no_args_is_help=True)

_COLUMNS = [
    "id",
    "created_at",
    "actor_name",
    "actor_client_id",
    "action",
    "payment_id",
    "old_token",
    "new_token",
    "reason",
]


@app.command("list")
def list_command(
    payment_id: Annotated[
        str | None, typer.Option("--payment-id", help="Only this payment's entries.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
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
    print_table("audit trail", _COLUMNS, [[e[c] for c in _COLUMNS] for e in entries])
