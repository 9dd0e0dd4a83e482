"""``payorch payments``: operator commands on payments."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.ops_output import IfMatchOption, fail, parse_if_match, print_action
from orchestrator.cli.output import print_json, print_table
from orchestrator.ops.commands import retry_payment
from orchestrator.ops.errors import OpsError
from orchestrator.ops.refund_sync import sync_payment_refunds

app = typer.Typer(help="Operator commands on payments.", no_args_is_help=True)


@app.command()
def retry(
    payment_id: str,
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded in the audit trail).", show_default=False)
    ],
    operator: OperatorOption = None,
    if_match: IfMatchOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Re-queue a needs_attention payment with fresh attempts, from where it stopped."""
    actor = cli_operator(operator)
    precondition = parse_if_match(if_match)
    container = bootstrap(load_settings())
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
