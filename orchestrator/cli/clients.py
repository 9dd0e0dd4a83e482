"""``payorch clients``: API clients and their keys.

``payorch clients keys add|list|revoke`` rotates a client's keys: add a key, let the client
switch to it, revoke the old one (each change audited under ``--operator`` with a reason).
A key is printed once, when it is made; lists show its first characters only."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.output import Column, WideFlag, errors, print_json, print_secret, print_table
from orchestrator.domain.model import ApiClient, ApiKey, Role
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.api_keys import (
    ClientNotFound,
    KeyNotFound,
    issue_client_key,
    list_keys,
    revoke_client_key,
)
from orchestrator.ops.errors import OpsError
from orchestrator.services.api_keys import create_client, list_clients, revoke_client

app = typer.Typer(help="API clients and keys.", no_args_is_help=True)
keys_app = typer.Typer(
    help="A client's API keys: add one, list them, revoke one (rotation).", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _describe(client: ApiClient) -> dict[str, object]:
    return {
        "id": client.id,
        "name": client.name,
        "role": client.role.value,
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


# At 80 columns: who and what role; revoked_at is hidden last of the extras (a revoked
# client is the one to notice), and --wide shows them all (orchestrator.cli.output).
_LIST_COLUMNS = [
    Column("id", id=True),
    Column("name"),
    Column("role"),
    Column("revoked_at", extra=True),
    Column("created_at", extra=True),
]


@app.command("list")
def list_command(wide: WideFlag = False, as_json: JsonFlag = False) -> None:
    """List clients (their keys: payorch clients keys list CLIENT)."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    clients = [_describe(c) for c in list_clients(container.lookup_uow)]
    if as_json:
        print_json(clients)
        return
    rows = [[c[column.name] for column in _LIST_COLUMNS] for c in clients]
    print_table("API clients", _LIST_COLUMNS, rows, wide=wide)


@app.command()
def revoke(client_id: str, as_json: JsonFlag = False) -> None:
    """Revoke a client and every key it has: its next request gets 401."""
    client = revoke_client(bootstrap(load_settings(), publisher=NullPublisher()).uow, client_id)
    if client is None:
        errors.print(f"no client {client_id!r}")
        raise typer.Exit(1)
    if as_json:
        print_json(_describe(client))
    else:
        typer.echo(f"revoked {client.id} ({client.name})")


def _describe_key(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "client_id": key.client_id,
        "key_prefix": key.key_prefix,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


ReasonOption = Annotated[str, typer.Option("--reason", help="Why: recorded in the audit trail.")]


@keys_app.command("add")
def keys_add(
    client_id: Annotated[str, typer.Argument(help="The client (cli_…).")],
    reason: ReasonOption,
    operator: OperatorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Make another key for a client and print it (shown once); its other keys keep working."""
    actor = cli_operator(operator)
    container = bootstrap(load_settings(), publisher=NullPublisher())
    try:
        done = issue_client_key(container.uow, actor, client_id, reason=reason)
    except ClientNotFound:
        errors.print(f"no active client {client_id!r}")
        raise typer.Exit(1) from None
    except OpsError as error:
        errors.print(f"refused: {error.message}")
        raise typer.Exit(2) from None
    key = done.issued.key
    assert key is not None
    if as_json:
        print_json({**_describe_key(key), "api_key": done.issued.api_key})
        return
    typer.echo(f"added key {key.id} to {client_id} (audited as {actor.name})")
    typer.echo("API key (store it now: it cannot be shown again):")
    print_secret(done.issued.api_key)


@keys_app.command("list")
def keys_list(
    client_id: Annotated[str, typer.Argument(help="The client (cli_…).")],
    as_json: JsonFlag = False,
) -> None:
    """A client's keys, first characters only, active and revoked."""
    container = bootstrap(load_settings(), publisher=NullPublisher())
    try:
        keys = [_describe_key(k) for k in list_keys(container.lookup_uow, client_id)]
    except ClientNotFound:
        errors.print(f"no client {client_id!r}")
        raise typer.Exit(1) from None
    if as_json:
        print_json(keys)
        return
    columns = ["id", "key_prefix", "created_at", "revoked_at"]
    print_table(f"API keys of {client_id}", columns, [[k[c] for c in columns] for k in keys])


@keys_app.command("revoke")
def keys_revoke(
    client_id: Annotated[str, typer.Argument(help="The client (cli_…).")],
    key_id: Annotated[str, typer.Argument(help="The key (key_…), from keys list.")],
    reason: ReasonOption,
    operator: OperatorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Revoke one key at once (its next request gets 401); the client's other keys keep working."""
    actor = cli_operator(operator)
    container = bootstrap(load_settings(), publisher=NullPublisher())
    try:
        done = revoke_client_key(container.uow, actor, client_id, key_id, reason=reason)
    except KeyNotFound:
        errors.print(f"client {client_id!r} has no key {key_id!r}")
        raise typer.Exit(1) from None
    except OpsError as error:
        errors.print(f"refused: {error.message}")
        raise typer.Exit(2) from None
    if as_json:
        print_json({"key": _describe_key(done.key), "audited": done.audit is not None})
    elif done.audit is None:
        typer.echo(f"{key_id} was already revoked: nothing changed")
    else:
        typer.echo(f"revoked {key_id} of {client_id} (audited as {actor.name})")
