"""``payorch payments retry --status needs_attention …`` as operators run it: a subprocess
against PostgreSQL and a RabbitMQ vhost of its own (the wake-ups it publishes are read back
from the queue), a dry run first, clean refusals with exit codes and no traceback."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from orchestrator.bootstrap import Container
from orchestrator.domain.model import ApiClient
from orchestrator.domain.states import PaymentStatus
from tests.harness.containers import build_container
from tests.harness.seeds import new_merchant, reload
from tests.integration.bulk_retry_helpers import LEASE_SECONDS, audit_rows, parked, take_wake_ups
from tests.integration.lease_helpers import (
    cli_environment,
    run_payorch,
    run_payorch_json,
)

BULK = ("payments", "retry", "--status", "needs_attention")


@dataclass
class Cli:
    container: Container
    merchant: ApiClient
    env: dict[str, str]
    broker_url: str


@contextmanager
def _cli(database_url: str, broker_url: str) -> Iterator[Cli]:
    container = build_container(database_url, lease_seconds=LEASE_SECONDS)
    env = cli_environment(database_url, broker_url, PAYORCH_OPERATOR="alice", COLUMNS="80")
    try:
        yield Cli(container, new_merchant(container, "shop"), env, broker_url)
    finally:
        container.close()


@pytest.fixture
def cli(
    make_postgres_database: Callable[[], str], make_broker_url: Callable[[], str]
) -> Iterator[Cli]:
    """A database and a vhost of the test's own: its counts are all its own."""
    with _cli(make_postgres_database(), make_broker_url()) as fresh:
        yield fresh


@pytest.fixture(scope="module")
def shared_cli(
    make_postgres_database: Callable[[], str], make_broker_url: Callable[[], str]
) -> Iterator[Cli]:
    """For refusals, which change nothing (each checks that its own payment is untouched)."""
    with _cli(make_postgres_database(), make_broker_url()) as shared:
        yield shared


def test_a_dry_run_lists_then_the_run_retries_each_parked_payment_and_publishes_it(
    cli: Cli,
) -> None:
    payments = [parked(cli.container, cli.merchant, f"cli-bulk-{n}") for n in range(2)]

    dry = run_payorch(*BULK, "--dry-run", "--reason", "INC-42", env=cli.env)

    assert dry.returncode == 0, dry.stdout + dry.stderr
    listed = [line.split("│")[1].strip() for line in dry.stdout.splitlines() if "pay_" in line]
    assert listed == [p.id for p in payments]
    assert max(len(line) for line in dry.stdout.splitlines()) <= 80
    assert "dry run: 2 parked payment(s) would be retried; nothing changed." in dry.stdout
    for payment in payments:
        assert reload(cli.container, payment.id).lease_token == payment.lease_token

    done = run_payorch_json(*BULK, "--reason", "provider outage over, INC-42", env=cli.env)

    assert (done["matched"], done["retried"], done["skipped"]) == (2, 2, 0)
    assert [item["payment_id"] for item in done["data"]] == [p.id for p in payments]
    assert take_wake_ups(cli.broker_url, 2) == [(p.id, p.lease_token + 1) for p in payments]
    for payment in payments:
        assert reload(cli.container, payment.id).status is PaymentStatus.PROCESSING
        assert audit_rows(cli.container, payment.id) == [
            ("retry", "cli:alice", "provider outage over, INC-42")
        ]

    again = run_payorch(*BULK, "--reason", "INC-42", env=cli.env)

    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "No parked payment matches; nothing retried."
    for payment in payments:
        assert len(audit_rows(cli.container, payment.id)) == 1


def test_the_summary_line_fits_eighty_columns(cli: Cli) -> None:
    parked(cli.container, cli.merchant, "cli-summary")

    result = run_payorch(*BULK, "--reason", "INC-42", env=cli.env)

    assert result.returncode == 0, result.stderr
    [line] = result.stdout.strip().splitlines()
    assert line == "retried 1 of 1 matched."
    assert len(line) <= 80


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        ((*BULK[:3], "processing", "--reason", "r"), 2, "leases takeover"),
        ((*BULK, "--since", "2026-12-05T14:00:00", "--reason", "r"), 2, "time zone"),
        ((*BULK, "--since", "last tuesday", "--reason", "r"), 2, "ISO 8601"),
        ((*BULK, "--connector", "acct_1", "--reason", "r"), 2, "connector account id"),
        ((*BULK, "--connector", "ca_" + "0" * 24, "--reason", "r"), 3, "No connector account"),
        ((*BULK, "--reason", "  "), 2, "reason"),
        (("payments", "retry", "--reason", "r"), 2, "--status needs_attention"),
        ((*BULK, "pay_" + "0" * 32, "--reason", "r"), 2, "not both"),
        (("payments", "retry", "pay_" + "0" * 32, "--dry-run", "--reason", "r"), 2, "--status"),
        ((*BULK, "--if-match", '"3.needs_attention"', "--reason", "r"), 2, "one payment"),
        (BULK, 2, "--reason"),
    ],
)
def test_bad_input_is_a_clean_error_with_its_exit_code_and_changes_nothing(
    shared_cli: Cli, args: tuple[str, ...], code: int, says: str
) -> None:
    cli = shared_cli
    payment = parked(cli.container, cli.merchant, f"cli-untouched-{uuid.uuid4().hex}")

    result = run_payorch(*args, env=cli.env)

    assert result.returncode == code, result.stdout + result.stderr
    assert says in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stdout + result.stderr
    assert reload(cli.container, payment.id).lease_token == payment.lease_token
    assert audit_rows(cli.container, payment.id) == []
