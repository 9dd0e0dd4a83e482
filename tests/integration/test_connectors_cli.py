"""``payorch connectors add|list|disable`` as operators run them (subprocesses) on SQLite
and PostgreSQL: credentials from options, the environment or stdin, never printed; clear
errors without tracebacks; the disable audited."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import audit_log, connector_accounts
from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.support.processes import payorch_command, process_environment

KEY = "sk_test_51CliSecretKeyValue0000WXYZ"


@dataclass
class Cli:
    container: Container
    merchant_id: str
    env: dict[str, str]

    def run(self, *args: str, stdin: str | None = None, **env: str):
        return subprocess.run(
            payorch_command("connectors", *args),
            env={**self.env, **env},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def cli(database_url: str) -> Iterator[Cli]:
    container = build_container(database_url)
    merchant = create_client(container.uow, "shop", Role.MERCHANT).client
    env = process_environment(
        {
            "PAYORCH_ENV": "test",
            "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
            "PAYORCH_DATABASE_URL": database_url,
            "PAYORCH_LOG_LEVEL": "WARNING",
            "PAYORCH_OPERATOR": "alice",
        }
    )
    try:
        yield Cli(container, merchant.id, env)
    finally:
        container.close()


def test_add_list_and_disable_never_print_a_secret(cli: Cli) -> None:
    added = cli.run(
        "add",
        "--client",
        cli.merchant_id,
        "--provider",
        "stripe",
        "--name",
        "main",
        "--json",
        PAYORCH_CONNECTOR_API_KEY=KEY,
    )
    assert added.returncode == 0, added.stderr
    account = json.loads(added.stdout)
    from_stdin = cli.run(
        "add",
        "--client",
        cli.merchant_id,
        "--provider",
        "stripe",
        "--name",
        "connected",
        "--credentials-stdin",
        stdin=json.dumps({"stripe_account": "acct_1StdinConnected"}),
    )
    listed = cli.run("list", "--json")
    # --wide: at the default 80 columns the credential hints are an extra, hidden column.
    table = cli.run("list", "--wide")
    disabled = cli.run("disable", account["id"], "--reason", "rotating keys")

    assert account["credentials"] == {"api_key": "…WXYZ"}
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert "acct_1StdinConnected" not in from_stdin.stdout
    assert [a["name"] for a in json.loads(listed.stdout)] == ["main", "connected"]
    assert "main" in table.stdout and "…WXYZ" in table.stdout
    assert disabled.returncode == 0, disabled.stderr
    assert "disabled" in disabled.stdout
    for result in (added, from_stdin, listed, table, disabled):
        assert KEY not in result.stdout + result.stderr
    with cli.container.engine.connect() as conn:
        status = conn.execute(
            sa.select(connector_accounts.c.status).where(connector_accounts.c.id == account["id"])
        ).scalar_one()
        audit = conn.execute(sa.select(audit_log.c.actor_name, audit_log.c.reason)).one()
    assert status == "disabled"
    assert tuple(audit) == ("alice", "rotating keys")


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("--provider", "stripe", "--api-key", "pk_live_nope12345678"), None, "api_key"),
        (("--provider", "paypal", "--api-key", KEY), None, "provider"),
        (("--provider", "stripe", "--credentials-stdin"), "not json", "not JSON"),
    ],
)
def test_bad_input_is_a_clear_error_without_a_traceback_and_nothing_is_stored(
    cli: Cli, args: tuple[str, ...], stdin: str | None, message: str
) -> None:
    result = cli.run("add", "--client", cli.merchant_id, "--name", "x", *args, stdin=stdin)

    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "pk_live_nope12345678" not in result.stderr + result.stdout
    with cli.container.engine.connect() as conn:
        assert (
            conn.execute(sa.select(sa.func.count()).select_from(connector_accounts)).scalar() == 0
        )


def test_an_unknown_client_or_account_is_named_in_the_error(cli: Cli) -> None:
    no_client = cli.run(
        "add", "--client", "cli_nobody", "--provider", "stripe", "--name", "x", "--api-key", KEY
    )
    no_account = cli.run("disable", "ca_" + "0" * 24, "--reason", "x")
    no_reason = cli.run("disable", "ca_" + "0" * 24, "--reason", " ")

    assert no_client.returncode == 1 and "cli_nobody" in no_client.stderr
    assert no_account.returncode == 1 and "ca_000" in no_account.stderr
    assert no_reason.returncode == 2 and "reason" in no_reason.stderr.lower()
    for result in (no_client, no_account, no_reason):
        assert "Traceback" not in result.stderr
