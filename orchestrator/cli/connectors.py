"""``payorch connectors``: merchants' connector accounts (add, list, disable).

Credentials come from options (each with an environment variable, so they need not sit in
the shell's history) or, with ``--credentials-stdin``, as one JSON object on standard
input.  They are never printed: answers show ``…last4`` per field, as the API does.  A
disable is an operator action: it takes a reason and is audited under ``--operator``."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from orchestrator.bootstrap import Container, bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.operator import OperatorOption, cli_operator
from orchestrator.cli.output import Column, WideFlag, errors, print_json, print_table
from orchestrator.domain.connector_accounts import ConnectorAccount
from orchestrator.domain.model import Role
from orchestrator.engine.publisher import NullPublisher
from orchestrator.ops.connector_accounts import AccountNotFound, disable_account, list_accounts
from orchestrator.ops.errors import OpsError
from orchestrator.services.api_keys import list_clients
from orchestrator.services.connector_accounts import AccountError

app = typer.Typer(
    help="Merchants' connector accounts (provider credentials).", no_args_is_help=True
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _secret_option(flag: str, envvar: str, help_text: str) -> Any:
    return typer.Option(flag, envvar=envvar, help=help_text, show_default=False, show_envvar=True)


def _describe(account: ConnectorAccount) -> dict[str, Any]:
    return {
        "id": account.id,
        "client_id": account.client_id,
        "provider": account.provider,
        "name": account.name,
        "credentials": dict(account.credential_hints),
        "status": account.status.value,
        "disabled_reason": account.disabled_reason,
        "created_at": account.created_at.isoformat(),
    }


def _container() -> Container:
    return bootstrap(load_settings(), publisher=NullPublisher())


def _credentials_from_stdin() -> dict[str, Any]:
    text = sys.stdin.read()
    try:
        given = json.loads(text)
    except json.JSONDecodeError as error:
        errors.print(f"--credentials-stdin: standard input is not JSON ({error.msg})")
        raise typer.Exit(2) from None
    if not isinstance(given, dict):
        errors.print('--credentials-stdin: give one JSON object, such as {"api_key": "sk_…"}')
        raise typer.Exit(2)
    return given


@app.command()
def add(
    client: Annotated[str, typer.Option("--client", help="The merchant's client id (cli_…).")],
    provider: Annotated[str, typer.Option("--provider", help="stripe or adyen.")],
    name: Annotated[str, typer.Option("--name", help="A name you will recognise.")],
    api_key: Annotated[
        str | None,
        _secret_option("--api-key", "PAYORCH_CONNECTOR_API_KEY", "Stripe sk_…/rk_…, or Adyen's."),
    ] = None,
    stripe_account: Annotated[
        str | None,
        _secret_option(
            "--stripe-account",
            "PAYORCH_CONNECTOR_STRIPE_ACCOUNT",
            "A connected account (acct_…) under the platform key.",
        ),
    ] = None,
    merchant_account: Annotated[
        str | None,
        _secret_option(
            "--merchant-account", "PAYORCH_CONNECTOR_MERCHANT_ACCOUNT", "Adyen merchant account."
        ),
    ] = None,
    hmac_key: Annotated[
        str | None,
        _secret_option("--hmac-key", "PAYORCH_CONNECTOR_HMAC_KEY", "Adyen notification HMAC key."),
    ] = None,
    live_url_prefix: Annotated[
        str | None,
        _secret_option(
            "--live-url-prefix", "PAYORCH_CONNECTOR_LIVE_URL_PREFIX", "Adyen live URL prefix."
        ),
    ] = None,
    credentials_stdin: Annotated[
        bool,
        typer.Option(
            "--credentials-stdin", help="Read the credentials as one JSON object from stdin."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a connector account to a merchant (its credentials are stored encrypted)."""
    if credentials_stdin:
        credentials = _credentials_from_stdin()
    else:
        given = {
            "api_key": api_key,
            "stripe_account": stripe_account,
            "merchant_account": merchant_account,
            "hmac_key": hmac_key,
            "live_url_prefix": live_url_prefix,
        }
        credentials = {k: v for k, v in given.items() if v is not None}
    container = _container()
    merchants = {c.id for c in list_clients(container.lookup_uow) if c.role is Role.MERCHANT}
    if client not in merchants:
        errors.print(f"no merchant client {client!r} (see payorch clients list)")
        raise typer.Exit(1)
    try:
        account = container.connector_account_service().create(
            client, provider=provider, name=name, credentials=credentials
        )
    except AccountError as error:
        where = f"{error.field}: " if error.field else ""
        errors.print(f"refused, nothing stored: {where}{error.message}")
        raise typer.Exit(2) from None
    if as_json:
        print_json(_describe(account))
        return
    hints = ", ".join(f"{k} {v}" for k, v in account.credential_hints.items())
    typer.echo(f"added {account.id} ({account.provider}, {account.name!r}) for {client}: {hints}")


# At 80 columns the account, its provider, name and status; the merchant (known anyway with
# --client) and the credential hints are hidden first, and --wide shows them all
# (orchestrator.cli.output).  credentials stays last: the rows build it apart.
_LIST_COLUMNS = [
    Column("id", id=True),
    Column("provider"),
    Column("name"),
    Column("status"),
    Column("client_id", id=True, extra=True),
    Column("credentials", extra=True),
]


@app.command("list")
def list_command(
    client: Annotated[
        str | None, typer.Option("--client", help="Only this merchant's (cli_…).")
    ] = None,
    wide: WideFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """List connector accounts (credentials as …last4)."""
    accounts = [_describe(a) for a in list_accounts(_container().read_only_uow, client_id=client)]
    if as_json:
        print_json(accounts)
        return
    rows = [
        [
            *(a[column.name] for column in _LIST_COLUMNS[:-1]),
            ", ".join(f"{k} {v}" for k, v in a["credentials"].items()),
        ]
        for a in accounts
    ]
    print_table("Connector accounts", _LIST_COLUMNS, rows, wide=wide)


@app.command()
def disable(
    account_id: Annotated[str, typer.Argument(help="The account (ca_…).")],
    reason: Annotated[str, typer.Option("--reason", help="Why: recorded in the audit trail.")],
    operator: OperatorOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Disable an account (audited): new payments cannot use it, payments on it keep it."""
    actor = cli_operator(operator)
    try:
        done = disable_account(_container().uow, actor, account_id, reason=reason)
    except AccountNotFound:
        errors.print(f"no connector account {account_id!r}")
        raise typer.Exit(1) from None
    except OpsError as error:
        errors.print(f"refused: {error.message}")
        raise typer.Exit(2) from None
    if as_json:
        print_json({"account": _describe(done.account), "audited": done.audit is not None})
        return
    if done.audit is None:
        typer.echo(f"{account_id} was already disabled: nothing changed")
    else:
        typer.echo(f"disabled {account_id} (audited as {actor.name}: {done.audit.reason})")
