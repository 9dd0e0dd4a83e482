"""``payorch clients``: API clients and their keys."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import errors, print_json, print_secret, print_table
from orchestrator.domain.model import ApiClient, Role
from orchestrator.engine.publisher import NullPublisher
from orchestrator.services.api_keys import create_client, list_clients, revoke_client

app = typer.Typer(help="API clients and keys.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _describe(client: ApiClient) -> dict[str, object]:
    return {
        "id": client.id,
        "name": client.name,
        "role": client.role.value,
        "key_prefix": client.key_prefix,
        "created_at": client.created_at.isoformat(),
        "revoked_at": client.revoked_at.isoformat() if client.revoked_at else None,
    }


@app.command()
def create(
    name: str,
    role: Annotated[
        Role, typer.Option(help="merchant: payments; ops: operations.")
    ] = Role.MERCHANT,
    as_json: JsonFlag = False,
) -> None:
    """Create a client and print its API key (shown once; only a hash is stored)."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    issued = create_client(container.uow, name, role)
    data = {
        "id": issued.client.id,
        "name": issued.client.name,
        "role": issued.client.role.value,
        "api_key": issued.api_key,
    }
    if as_json:
        print_json(data)
        return
    # The key alone on its own line, whole: never in a table that a narrow terminal cuts.
    typer.echo(f"created API client {issued.client.id} ({issued.client.name}, {data['role']})")
    typer.echo("API key (store it now: it cannot be shown again):")
    print_secret(issued.api_key)


@app.command("list")
def list_command(as_json: JsonFlag = False) -> None:
    """List clients (key prefixes only)."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    clients = [_describe(c) for c in list_clients(container.lookup_uow)]
    if as_json:
        print_json(clients)
        return
    columns = ["id", "name", "role", "key_prefix", "created_at", "revoked_at"]
    print_table("API clients", columns, [[c[k] for k in columns] for c in clients])


@app.command()
def revoke(client_id: str, as_json: JsonFlag = False) -> None:
    """Revoke a client's key: its next request gets 401."""
    client = revoke_client(bootstrap(load_settings(), publisher=NullPublisher()).uow, client_id)
    if client is None:
        errors.print(f"no client {client_id!r}")
        raise typer.Exit(1)
    if as_json:
        print_json(_describe(client))
    else:
        typer.echo(f"revoked {client.id} ({client.name})")
