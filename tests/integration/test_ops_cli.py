"""The operator CLI as operators run it: ``payorch leases|payments|audit …`` subprocesses
against PostgreSQL and a real RabbitMQ vhost."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient, PaymentRecord, Role
from orchestrator.domain.states import PaymentStatus
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, finish_with_token, force, reload, settle_success
from tests.integration.lease_helpers import (
    cli_environment,
    expire_leases,
    run_payorch,
    run_payorch_json,
    take_process_payment_messages,
)

LEASE_SECONDS = 60.0


@dataclass
class Cli:
    container: Container
    merchant: ApiClient
    env: dict[str, str]
    broker_url: str

    def settled(self, key: str) -> PaymentRecord:
        """Claimed by a worker that recorded the provider's answer and is about to finish."""
        record = accept(self.container, self.merchant, key)
        with self.container.uow() as uow:
            now = uow.now()
            claimed = uow.leases.claim(
                record.id,
                carried_token=record.lease_token,
                owner="worker-1",
                now=now,
                lease_until=now + timedelta(seconds=LEASE_SECONDS),
            )
            uow.commit()
        assert claimed is not None
        return settle_success(self.container, claimed)

    def finish(self, record: PaymentRecord) -> PaymentRecord | None:
        return finish_with_token(self.container, record)


@pytest.fixture(scope="module")
def cli(make_postgres_database, broker_url) -> Iterator[Cli]:
    database_url = make_postgres_database()
    container = build_container(database_url, lease_seconds=LEASE_SECONDS)
    merchant = create_client(container.uow, "shop", Role.MERCHANT).client
    try:
        yield Cli(container, merchant, cli_environment(database_url, broker_url), broker_url)
    finally:
        container.close()


def test_takeover_on_the_command_line_fences_audits_and_requeues(cli):
    holder = cli.settled("cli-expired")
    expire_leases(cli.container, [holder.id], ago=timedelta(seconds=1))

    result = run_payorch_json(
        "leases",
        "takeover",
        holder.id,
        "--reason",
        "worker host died",
        "--operator",
        "alice",
        env=cli.env,
    )

    new_token = holder.lease_token + 1
    assert result["action"] == "takeover"
    assert (result["old_token"], result["new_token"]) == (holder.lease_token, new_token)
    assert result["published"] is True
    assert take_process_payment_messages(cli.broker_url, payment_id=holder.id) == [
        (holder.id, new_token)
    ]
    assert cli.finish(holder) is None  # the previous holder is fenced out
    [entry] = run_payorch_json("audit", "list", "--payment-id", holder.id, env=cli.env)["data"]
    assert entry["actor_client_id"] == "cli:alice"
    assert entry["actor_name"] == "alice"
    assert entry["action"] == "takeover"
    assert entry["reason"] == "worker host died"
    assert (entry["old_token"], entry["new_token"]) == (holder.lease_token, new_token)


def test_the_operator_defaults_to_the_login_name(cli):
    holder = cli.settled("cli-default-operator")
    env = {**cli.env, "USER": "bob", "LOGNAME": "bob"}

    result = run_payorch_json(
        "leases", "takeover", holder.id, "--reason", "stuck", "--force", env=env
    )

    assert result["audit"]["actor_client_id"] == "cli:bob"


def test_a_live_lease_needs_force_on_the_command_line_too(cli):
    holder = cli.settled("cli-live")

    refused = run_payorch(
        "leases",
        "takeover",
        holder.id,
        "--reason",
        "looks stuck",
        "--operator",
        "alice",
        env=cli.env,
    )

    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "force" in refused.stderr
    assert reload(cli.container, holder.id).lease_token == holder.lease_token

    forced = run_payorch(
        "leases",
        "takeover",
        holder.id,
        "--reason",
        "wedged",
        "--force",
        "--operator",
        "alice",
        env=cli.env,
    )

    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "takeover" in forced.stdout  # the rich table
    assert cli.finish(holder) is None


def test_refusals_have_distinct_exit_codes(cli):
    unknown = run_payorch(
        "leases",
        "takeover",
        "pay_" + "0" * 32,
        "--reason",
        "r",
        "--operator",
        "alice",
        env=cli.env,
    )
    assert unknown.returncode == 3, unknown.stderr
    holder = cli.settled("cli-blank-reason")
    blank = run_payorch(
        "leases",
        "takeover",
        holder.id,
        "--reason",
        "  ",
        "--force",
        "--operator",
        "alice",
        env=cli.env,
    )
    assert blank.returncode == 2, blank.stderr
    bad_name = run_payorch(
        "leases",
        "takeover",
        holder.id,
        "--reason",
        "r",
        "--operator",
        "not a name",
        env=cli.env,
    )
    assert bad_name.returncode == 2, bad_name.stderr
    assert reload(cli.container, holder.id).lease_token == holder.lease_token


def test_a_parked_payment_is_listed_and_retried_on_the_command_line(cli):
    holder = cli.settled("cli-parked")
    parked = force(
        cli.container,
        holder.id,
        status="needs_attention",
        locked_until=None,
        lease_owner=None,
        last_error="OutcomeUnknown: read timeout",
    )
    listed = run_payorch_json("leases", "list", "--state", "needs_attention", env=cli.env)
    assert parked.id in [lease["payment_id"] for lease in listed["data"]]
    table = run_payorch("leases", "list", "--state", "needs_attention", env=cli.env)
    assert table.returncode == 0 and "needs_attention" in table.stdout

    result = run_payorch_json(
        "payments",
        "retry",
        parked.id,
        "--reason",
        "provider fixed",
        "--operator",
        "carol",
        env=cli.env,
    )

    assert result["action"] == "retry"
    assert result["status"] == "processing"
    assert result["audit"]["actor_client_id"] == "cli:carol"
    assert reload(cli.container, parked.id).status is PaymentStatus.PROCESSING
    again = run_payorch(
        "payments", "retry", parked.id, "--reason", "again", "--operator", "carol", env=cli.env
    )
    assert again.returncode == 4, again.stderr
    wide = {**cli.env, "COLUMNS": "300"}  # rich wraps cells to the terminal's width
    audit = run_payorch("audit", "list", "--payment-id", parked.id, env=wide)
    assert audit.returncode == 0 and "provider fixed" in audit.stdout


def test_if_match_on_the_command_line_refuses_a_stale_lease_with_exit_5(cli):
    holder = cli.settled("cli-if-match")
    expire_leases(cli.container, [holder.id], ago=timedelta(seconds=1))
    listed = run_payorch_json("leases", "list", "--state", "expired", env=cli.env)
    [row] = [lease for lease in listed["data"] if lease["payment_id"] == holder.id]
    seen = row["etag"]
    stale = f'"{holder.lease_token - 1}.processing"'

    refused = run_payorch(
        "leases", "takeover", holder.id, "--reason", "r", "--if-match", stale,
        "--operator", "alice", env=cli.env,
    )  # fmt: skip

    assert refused.returncode == 5, refused.stderr
    assert reload(cli.container, holder.id).lease_token == holder.lease_token
    # The tag as listed, or without the quotes a shell may have eaten.
    taken = run_payorch_json(
        "leases", "takeover", holder.id, "--reason", "r", "--if-match", seen.strip('"'),
        "--operator", "alice", env=cli.env,
    )  # fmt: skip
    assert taken["new_token"] == holder.lease_token + 1
    again = run_payorch(
        "leases", "takeover", holder.id, "--reason", "r", "--if-match", seen, "--force",
        "--operator", "alice", env=cli.env,
    )  # fmt: skip
    assert again.returncode == 5, again.stderr
