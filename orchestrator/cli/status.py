"""``payorch status``: what is stuck, at a glance (the body of ``GET /v1/ops/status``)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import print_json, print_table
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.payment_documents import status_representation
from orchestrator.ops.status import get_status

# Exit status when something waits for a person, so `payorch status` works in a check script.
EXIT_UNHEALTHY = 1


def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Counts by status, oldest processing age, expired leases, needs_attention.  Exits 1
    when a payment needs attention or a lease is expired."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    data = status_representation(get_status(container.read_only_uow, container.settings))
    if as_json:
        print_json(data)
    else:
        leases = data["leases"]
        age = data["oldest_processing_age_seconds"]
        webhook_age = data["oldest_undelivered_webhook_age_seconds"]
        rows = [[name, count] for name, count in data["payments_by_status"].items()]
        rows += [
            ["oldest processing", "-" if age is None else f"{age:.1f} s"],
            ["expired leases", leases["expired"]],
            ["active leases", leases["active"]],
            ["deferred / retry due", f"{leases['deferred']} / {leases['retry_due']}"],
            ["requires_action past half its timeout", data["requires_action_past_half_timeout"]],
            ["webhook backlog", data["webhook_backlog"]],
            [
                "oldest undelivered webhook",
                "-" if webhook_age is None else f"{webhook_age:.1f} s",
            ],
            ["disabled webhook endpoints", data["disabled_webhook_endpoints"]],
        ]
        verdict = "healthy" if data["healthy"] else "NEEDS A PERSON"
        print_table(f"payorch status at {data['now']}: {verdict}", ["", "count"], rows)
    if not data["healthy"]:
        raise typer.Exit(EXIT_UNHEALTHY)
