"""``payorch status``: what is stuck, at a glance (the body of ``GET /v1/ops/status``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings

# Exit status when something waits for a person, so `payorch status` works in a check
# script; a database it cannot reach is 69, never this 1 (orchestrator.cli.exit_codes).
from orchestrator.cli.exit_codes import EXIT_UNHEALTHY
from orchestrator.cli.output import print_json, print_table
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.payment_documents import status_representation
from orchestrator.ops.status import get_status


def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Counts by status, oldest processing age, expired leases, needs_attention.  Exits 1
    when a payment needs attention or a lease is expired, 69 when the database cannot be
    reached."""
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
        _print_circuits(data["connectors"])
        _print_reconciliation(data["reconciliation"])
        _print_failover(data["failover"])
    if not data["healthy"]:
        raise typer.Exit(EXIT_UNHEALTHY)


def _print_circuits(connectors: list[dict[str, Any]]) -> None:
    """A line per connector account whose circuit is not closed, or that still has
    payments waiting it out (decision 0082); nothing when every circuit is closed."""
    rows = [
        [
            entry["id"],
            entry["circuit"]["state"],
            entry["circuit"]["failures"],
            entry["circuit"]["next_probe_at"] or "-",
            entry["circuit"]["waiting_payments"],
        ]
        for entry in connectors
        if entry["circuit"]["state"] != "closed" or entry["circuit"]["waiting_payments"]
    ]
    if rows:
        print_table(
            "circuits (their payments wait, no attempt spent)",
            ["connector account", "state", "failures", "next probe", "waiting"],
            rows,
        )


def _print_reconciliation(reconciliation: dict[str, Any] | None) -> None:
    """The last completed reconciliation run's age and the open findings (decision 0092)."""
    if reconciliation is None:
        return
    age = reconciliation["last_run_age_seconds"]
    rows: list[list[Any]] = [
        ["last completed run", reconciliation["last_run_id"] or "never"],
        ["its age", "-" if age is None else f"{age / 3600:.1f} h"],
        ["open findings", reconciliation["open_findings"]],
    ]
    rows += [[f"  {kind}", n] for kind, n in reconciliation["open_findings_by_kind"].items()]
    print_table("reconciliation", ["", ""], rows)


def _print_failover(failover: dict[str, Any] | None) -> None:
    """The last hour's failover rate and its largest (account, reason) pairs (decision
    0097)."""
    if failover is None:
        return
    rate = f"{failover['failover_rate']:.1%} of {failover['attempts_ended']} attempts ended"
    rows: list[list[Any]] = [
        ["payments finished", failover["payments_finished"]],
        ["failovers", failover["failovers"]],
        ["failover rate", rate],
    ]
    rows += [
        [f"  {entry['connector_account']} ({entry['reason']})", entry["failovers"]]
        for entry in failover["top_failovers"]
    ]
    print_table("failovers, last hour", ["", ""], rows)
