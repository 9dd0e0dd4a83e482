"""``payorch secrets``: stored secrets and the root key that seals them.

``reencrypt`` reseals every stored secret (webhook endpoint signing secrets, connector
account credentials) under the current ``PAYORCH_SECRET_KEY``, opening each with any key of
the ring (``PAYORCH_PREVIOUS_SECRET_KEYS``).  The SECRET_KEY rotation runbook in
docs/operations/runbooks.md says when to run it."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import errors, print_json, print_table
from orchestrator.engine.publisher import NullPublisher
from orchestrator.services.secret_rotation import ColumnReport, reseal_all

app = typer.Typer(help="Stored secrets and the key that seals them.", no_args_is_help=True)


@app.command()
def reencrypt(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be resealed; change nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Reseal every stored secret under the current PAYORCH_SECRET_KEY.

    Run it after moving the old key to PAYORCH_PREVIOUS_SECRET_KEYS and restarting every
    process; drop the old key only once it reports nothing left to reseal.  Safe beside
    live traffic, and to run again.  Exits 1 if a secret opens under no key of the ring."""
    settings = load_settings()
    container = bootstrap(settings, publisher=NullPublisher())
    try:
        reports = reseal_all(container.uow, settings.secret_key_ring, dry_run=dry_run)
    finally:
        container.close()
    if as_json:
        print_json({"dry_run": dry_run, "columns": [_describe(r) for r in reports]})
    else:
        print_table(
            "Would reseal (dry run)" if dry_run else "Resealed under the current key",
            ["column", "resealed", "already current", "changed meanwhile", "unreadable"],
            [
                (r.column.value, r.resealed, r.current, r.changed_meanwhile, len(r.unreadable))
                for r in reports
            ],
        )
    unreadable = [(r.column.value, row) for r in reports for row in r.unreadable]
    for column, row in unreadable:
        errors.print(
            f"{column} of {row} opens under no key of the ring: set that secret again "
            "(rotate the endpoint's secret, or update the account's credentials)"
        )
    if unreadable:
        raise typer.Exit(1)


def _describe(report: ColumnReport) -> dict[str, object]:
    return {
        "column": report.column.value,
        "resealed": report.resealed,
        "already_current": report.current,
        "changed_meanwhile": report.changed_meanwhile,
        "unreadable": report.unreadable,
    }
