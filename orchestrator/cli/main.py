"""``payorch``: the one command line for migrations, servers, operations and the demo."""

from __future__ import annotations

import typer

from orchestrator.cli import clients, db, serve

app = typer.Typer(
    name="payorch",
    help="Payment orchestrator: idempotent accept API, leased workers, exactly-once effect.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(clients.app, name="clients")
app.command("api")(serve.api)
app.command("worker")(serve.worker)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
