"""``payorch``: the one command line for migrations, servers, operations and the demo."""

from __future__ import annotations

import typer

from orchestrator.cli import (
    api_server,
    audit,
    clients,
    connectors,
    db,
    leases,
    payments,
    reconcile,
    relay,
    secrets,
    status,
    sweeper,
)
from orchestrator.cli.bench import bench
from orchestrator.cli.demo import demo
from orchestrator.cli.help_text import PayorchGroup
from orchestrator.cli.provider_sim import provider_sim
from orchestrator.cli.worker import command as worker_command

app = typer.Typer(
    name="payorch",
    help="Payment orchestrator: idempotent accept API, leased workers, exactly-once effect.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's plain help: paragraphs rewrapped to the terminal, "\b" paragraphs (examples)
    # kept line for line, option names never cut (rich's panels cut them with "…" at 80
    # columns); command summaries whole (orchestrator.cli.help_text, decision 0096).
    rich_markup_mode=None,
    # The one error boundary: a database it cannot use is one line and exit 69.
    cls=PayorchGroup,
)
app.add_typer(db.app, name="db")
app.add_typer(clients.app, name="clients")
app.add_typer(connectors.app, name="connectors")
app.command("api")(api_server.api)
app.command("worker")(worker_command.worker)
app.command("provider-sim")(provider_sim)
app.command("demo")(demo)
app.command("bench")(bench)
app.command("sweeper")(sweeper.sweeper)
app.command("sweep")(sweeper.sweep)
app.command("beat")(sweeper.beat)
app.command("dispatcher")(sweeper.dispatcher)
app.command("relay")(relay.relay)
app.add_typer(leases.app, name="leases")
app.add_typer(payments.app, name="payments")
app.command("status")(status.status)
app.command("reconcile")(reconcile.reconcile)
app.add_typer(audit.app, name="audit")
app.add_typer(secrets.app, name="secrets")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
