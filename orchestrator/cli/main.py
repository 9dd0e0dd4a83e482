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
    relay,
    status,
    sweeper,
)
from orchestrator.cli.bench import bench
from orchestrator.cli.demo import demo
from orchestrator.cli.provider_sim import provider_sim
from orchestrator.cli.worker import command as worker_command

app = typer.Typer(
    name="payorch",
    help="Payment orchestrator: idempotent accept API, leased workers, exactly-once effect.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
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
app.add_typer(audit.app, name="audit")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
