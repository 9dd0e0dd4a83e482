"""``payorch payments show|list`` and ``payorch status`` as operators run them: real
subprocesses against the database (issue 15).  Human tables and --json."""

from __future__ import annotations

import json
from datetime import timedelta

from orchestrator.domain.model import Role
from orchestrator.services.api_keys import create_client
from tests.harness.containers import build_container
from tests.harness.seeds import accept, force
from tests.integration.lease_helpers import (
    cli_environment,
    expire_leases,
    run_payorch,
    run_payorch_json,
)


def test_payments_show_list_and_status_answer_in_tables_and_json(make_postgres_database) -> None:
    # PostgreSQL only: the CLI is a thin layer over the queries the API tests run on both.
    database_url = make_postgres_database()
    container = build_container(database_url)
    try:
        shop = create_client(container.uow, "shop", Role.MERCHANT).client
        stuck = accept(container, shop, "cli-stuck", amount=1234)
        expire_leases(container, [stuck.id], ago=timedelta(minutes=1))
        parked = accept(container, shop, "cli-parked")
        force(container, parked.id, status="needs_attention", customer_reference="cus-cli")
    finally:
        container.close()
    env = cli_environment(database_url, "memory://")

    shown = run_payorch_json("payments", "show", stuck.id, env=env)
    assert shown["payment"]["id"] == stuck.id and shown["payment"]["amount"] == 1234
    assert shown["operations"][0]["lease_state"] == "expired"
    table = run_payorch("payments", "show", stuck.id, env=env)
    assert table.returncode == 0 and "expired" in table.stdout and "1234 usd" in table.stdout
    missing = run_payorch("payments", "show", "pay_" + "0" * 32, env=env)
    assert missing.returncode == 3

    listed = run_payorch_json("payments", "list", "--customer-reference", "cus-cli", env=env)
    assert [p["id"] for p in listed["data"]] == [parked.id]
    first = run_payorch_json("payments", "list", "--limit", "1", env=env)
    assert first["has_more"] is True
    rest = run_payorch_json("payments", "list", "--cursor", first["next_cursor"], env=env)
    assert {p["id"] for p in first["data"] + rest["data"]} == {stuck.id, parked.id}
    assert run_payorch("payments", "list", "--cursor", "junk", env=env).returncode == 2

    # Something waits for a person: status says so, and exits 1 for check scripts.
    status = run_payorch("status", "--json", env=env)
    assert status.returncode == 1, status.stderr
    body = json.loads(status.stdout)
    assert body["needs_attention"] == 1 and body["leases"]["expired"] == 1
    human = run_payorch("status", env=env)
    assert human.returncode == 1 and "NEEDS A PERSON" in human.stdout
