"""Tables and help at 80 columns (issue 44): real subprocesses against PostgreSQL.

* list tables hide their extra columns when the terminal is narrow, so every row is one
  line, every id whole, no line longer than the terminal; ``--wide`` shows every column,
  one line per row, wider than the terminal if need be;
* help is click's plain help: wrapped to the terminal, examples line for line, command
  summaries whole (never cut with "...");
* a payment waiting for its customer is requires_action in its lease etag, and not the
  oldest *processing* payment of ``payorch status``;
* ``audit list``, ``clients list`` and ``connectors list`` follow the same rule as
  ``payments list`` and ``leases list``, and take ``--wide``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

import pytest

from orchestrator.domain.model import Role
from orchestrator.engine.takeover import Actor
from orchestrator.ops.connector_accounts import disable_account
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force
from tests.integration.lease_helpers import cli_environment, run_payorch, run_payorch_json
from tests.support.processes import process_environment

NARROW = 80
WIDE = 250
_PAYMENT_COLUMNS = [
    "id",
    "status",
    "amount",
    "currency",
    "created_at",
    "client_id",
    "customer_reference",
    "idempotency_key",
]
_AUDIT_COLUMNS = [
    "payment_id",
    "action",
    "created_at",
    "actor_name",
    "reason",
    "old_token",
    "new_token",
    "actor_client_id",
    "id",
]
_CLIENT_COLUMNS = ["id", "name", "role", "revoked_at", "created_at"]
_CONNECTOR_COLUMNS = ["id", "provider", "name", "status", "client_id", "credentials"]
_LEASE_COLUMNS = [
    "kind",
    "payment_id",
    "lease",
    "attempts",
    "operation_id",
    "recovery_point",
    "lease_state",
    "lease_owner",
    "lease_token",
    "locked_until",
    "last_error",
    "etag",
]


@dataclass
class Shop:
    env: dict[str, str]
    payment_ids: list[str]
    waiting_id: str
    client_ids: list[str]
    account_ids: list[str]


@pytest.fixture(scope="module")
def shop(make_postgres_database) -> Shop:
    database_url = make_postgres_database()
    container = build_container(database_url)
    try:
        client = create_client(container.uow, "a-shop-with-a-long-name", Role.MERCHANT).client
        ids = []
        for n in range(3):
            record = accept(container, client, f"columns-{n}-" + "k" * 40, amount=123456)
            force(
                container,
                record.id,
                customer_reference=f"customer-reference-{n}-" + "r" * 30,
                last_error="provider_timeout: the read timed out after 10 s " * 3,
            )
            ids.append(record.id)
        waiting = accept(container, client, "columns-waiting")
        with container.uow() as uow:
            long_ago = uow.now() - timedelta(hours=2)
        force(container, waiting.id, waiting_for="customer", created_at=long_ago)
        ids.append(waiting.id)
        operator = create_client(container.uow, "the-operators-on-call", Role.OPS).client
        service = container.connector_account_service()
        accounts = [
            service.create(
                client.id,
                provider="stripe",
                name=f"stripe-account-number-{n}",
                credentials={"api_key": f"sk_test_51ColumnsSecretKeyValue000{n}WXYZ"},
            ).id
            for n in range(2)
        ]
        # Audited: the audit trail has an entry per disabled account, with a long reason.
        actor = Actor.operator("cli:alice-the-operator", "alice-the-operator")
        for account_id in accounts:
            disable_account(
                container.uow, actor, account_id, reason="rotated after the incident " * 3
            )
    finally:
        container.close()
    return Shop(
        cli_environment(database_url, "memory://"),
        ids,
        waiting.id,
        [client.id, operator.id],
        accounts,
    )


def run_at(columns: int, *args: str, env: dict[str, str]) -> list[str]:
    result = run_payorch(*args, env={**env, "COLUMNS": str(columns)})
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout.splitlines()


def body_rows(lines: list[str]) -> list[list[str]]:
    """Each body line of a rich table, as its cells (a folded row is several lines)."""
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if "│" in line]


def header(lines: list[str]) -> list[str]:
    """The column names, a folded name's pieces joined back."""
    rows = [line.split("┃")[1:-1] for line in lines if line.startswith("┃")]
    assert rows, lines
    return ["".join(row[i].strip() for row in rows) for i in range(len(rows[0]))]


def test_payments_list_at_80_columns_is_one_line_per_payment_with_ids_whole(
    shop: Shop,
) -> None:
    lines = run_at(NARROW, "payments", "list", env=shop.env)

    assert all(len(line) <= NARROW for line in lines), "\n".join(lines)
    names = header(lines)
    assert names[:4] == ["id", "status", "amount", "currency"], names
    assert len(names) < len(_PAYMENT_COLUMNS)
    rows = body_rows(lines)
    assert len(rows) == len(shop.payment_ids), "\n".join(lines)  # one line each
    assert sorted(row[0] for row in rows) == sorted(shop.payment_ids)  # whole ids
    statuses = {row[0]: row[1] for row in rows}
    assert statuses[shop.waiting_id] == "requires_action"
    caption = " ".join(line for line in lines if "│" not in line and "┃" not in line)
    assert "--wide" in caption and "idempotency_key" in caption, caption


def test_payments_list_wide_shows_every_column(shop: Shop) -> None:
    wide = run_at(WIDE, "payments", "list", "--wide", env=shop.env)
    assert header(wide) == _PAYMENT_COLUMNS
    assert len(body_rows(wide)) == len(shop.payment_ids)
    assert not any("--wide" in line for line in wide)

    # --wide at 80 columns: every column at its full width, wider than the terminal, one
    # line per row, ids whole (folding 8 columns into 80 made slivers and cut ids).
    narrow = run_at(NARROW, "payments", "list", "--wide", env=shop.env)
    assert header(narrow) == _PAYMENT_COLUMNS
    rows = body_rows(narrow)
    assert sorted(row[0] for row in rows) == sorted(shop.payment_ids), "\n".join(narrow)
    assert max(len(line) for line in narrow) > NARROW


def test_leases_list_at_80_columns_is_one_line_per_lease(shop: Shop) -> None:
    lines = run_at(NARROW, "leases", "list", env=shop.env)

    assert all(len(line) <= NARROW for line in lines), "\n".join(lines)
    names = header(lines)
    assert names[:4] == ["kind", "payment_id", "lease", "attempts"], names
    rows = body_rows(lines)
    assert len(rows) == len(shop.payment_ids), "\n".join(lines)
    assert sorted(row[1] for row in rows) == sorted(shop.payment_ids)

    wide = run_at(WIDE, "leases", "list", "--wide", env=shop.env)
    assert header(wide) == _LEASE_COLUMNS
    assert len(body_rows(wide)) == len(shop.payment_ids)


@pytest.mark.parametrize(
    ("command", "columns", "id_column", "narrow_first"),
    [
        (("audit", "list"), _AUDIT_COLUMNS, "payment_id", ["payment_id", "action"]),
        (("clients", "list"), _CLIENT_COLUMNS, "id", ["id", "name", "role"]),
        (("connectors", "list"), _CONNECTOR_COLUMNS, "id", ["id", "provider", "name", "status"]),
    ],
    ids=["audit list", "clients list", "connectors list"],
)
def test_audit_clients_and_connectors_lists_fit_80_columns_and_take_wide(
    shop: Shop,
    command: tuple[str, ...],
    columns: list[str],
    id_column: str,
    narrow_first: list[str],
) -> None:
    expected = {
        "audit": set(shop.account_ids),  # each disable's subject
        "clients": set(shop.client_ids),
        "connectors": set(shop.account_ids),
    }[command[0]]
    lines = run_at(NARROW, *command, env=shop.env)

    assert all(len(line) <= NARROW for line in lines), "\n".join(lines)
    names = header(lines)
    assert names[: len(narrow_first)] == narrow_first, names
    assert len(names) < len(columns), names  # something was hidden ...
    caption = " ".join(line for line in lines if "│" not in line and "┃" not in line)
    assert "--wide" in caption and columns[-1] in caption, caption  # ... and said so
    rows = body_rows(lines)
    assert len(rows) == len(expected), "\n".join(lines)  # one line each
    position = names.index(id_column)
    assert {row[position] for row in rows} == expected  # whole ids

    for width in (NARROW, WIDE):
        wide = run_at(width, *command, "--wide", env=shop.env)
        assert header(wide) == columns, "\n".join(wide)
        wide_rows = body_rows(wide)
        assert len(wide_rows) == len(expected), "\n".join(wide)
        assert {row[columns.index(id_column)] for row in wide_rows} == expected
        assert not any("--wide" in line for line in wide)


def test_a_payment_waiting_for_its_customer_is_requires_action_in_its_etag(
    shop: Shop,
) -> None:
    listing = run_payorch_json("leases", "list", env=shop.env)
    etags = {lease["payment_id"]: lease["etag"] for lease in listing["data"]}
    assert etags[shop.waiting_id].endswith('.requires_action"'), etags
    others = [etags[i] for i in shop.payment_ids if i != shop.waiting_id]
    assert all(etag.endswith('.processing"') for etag in others), etags


def test_status_oldest_processing_leaves_out_payments_waiting_for_their_customer(
    shop: Shop,
) -> None:
    status = run_payorch("status", "--json", env=shop.env)
    assert status.returncode in (0, 1), status.stderr  # 1: something waits for a person
    body = json.loads(status.stdout)
    assert body["payments_by_status"]["requires_action"] == 1
    # The waiting payment is two hours old; the processing ones were made just now.
    assert body["oldest_processing_age_seconds"] < 3600, body


_COMMANDS = [
    [],
    ["api"],
    ["worker"],
    ["provider-sim"],
    ["demo"],
    ["bench"],
    ["sweep"],
    ["dispatcher"],
    ["status"],
    ["reconcile"],
    ["clients"],
    ["leases"],
    ["leases", "list"],
    ["payments"],
    ["payments", "retry"],
    ["payments", "list"],
    ["audit", "list"],
    ["clients", "list"],
    ["connectors", "list"],
]


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: " ".join(c) or "payorch")
def test_help_fits_80_columns_and_cuts_nothing(command: list[str]) -> None:
    env = process_environment({"PAYORCH_ENV": "test"})
    result = run_payorch(*command, "--help", env={**env, "COLUMNS": str(NARROW)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= NARROW for line in lines), "\n".join(lines)
    # click cuts a command's summary with "..." when it is longer than a line; ours are
    # whole, wrapped in their column.
    assert not any(line.endswith("...") and "[ARGS]..." not in line for line in lines)


def test_the_command_list_shows_whole_summaries_and_provider_sim_its_examples() -> None:
    env = {**process_environment({"PAYORCH_ENV": "test"}), "COLUMNS": str(NARROW)}
    listing = " ".join(run_payorch("--help", env=env).stdout.split())
    assert "69 when the database cannot be reached." in listing

    lines = [
        line.strip() for line in run_payorch("provider-sim", "--help", env=env).stdout.splitlines()
    ]
    for example in (
        "payorch provider-sim --fault confirm:timeout_after_effect:0.1",
        "payorch provider-sim --fault confirm:error_500_after:amounts=1313",
        "payorch provider-sim --fault any:latency:seconds=0.05",
        "payorch provider-sim --fault create:rate_limit:0.2:retry_after=2",
    ):
        assert example in lines, lines  # one whole line each
