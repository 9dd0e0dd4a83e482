"""An open circuit as operators see it (decision 0082): ``GET /v1/ops/circuits``,
``connectors[]`` in ``GET /v1/ops/status``, ``payorch status`` (a real subprocess), the
console's overview and the ``payorch_circuit_state`` gauge, over real HTTP on PostgreSQL
(the gauge as the API's metrics port serves it).

The circuit is opened by the real gate (three failures reported as a worker would), and two
payments wait it out through the real engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from orchestrator import metrics
from orchestrator.api.app import create_app
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.model import Role
from orchestrator.engine.kinds.charge import process_payment
from orchestrator.engine.lease import ProcessResult
from orchestrator.ops.metrics_server import database_gauges
from orchestrator.services.api_keys import create_client
from tests.fakes.provider import FakeProvider
from tests.harness.containers import build_container
from tests.harness.seeds import accept, reload
from tests.harness.server import ServerThread
from tests.integration.console_helpers import signed_in
from tests.integration.lease_helpers import cli_environment, run_payorch

FAILURES = 3


@dataclass
class Api:
    url: str
    ops_key: str


def test_an_open_circuit_and_its_waiting_payments_are_visible_everywhere(
    make_postgres_database: Callable[[], str],
) -> None:
    database_url = make_postgres_database()
    provider = FakeProvider()
    container = build_container(
        database_url, provider=provider, circuit_failures=FAILURES, circuit_open_seconds=600.0
    )
    merchant = create_client(container.uow, "shop", Role.MERCHANT)
    ops = create_client(container.uow, "oncall", Role.OPS)
    gate = container.circuits.gate(PLATFORM_CIRCUIT_KEY)
    for _ in range(FAILURES):
        gate.admit()
        gate.settle(failed=True, probe=False)
    waiting = [accept(container, merchant.client, f"k-{n}") for n in range(2)]
    for record in waiting:
        result = process_payment(
            container.runner(), record.id, reload(container, record.id).lease_token
        )
        assert result is ProcessResult.WAITING
    assert provider.calls == []  # refused before any call

    try:
        with ServerThread(create_app(container)) as server:
            headers = {"Authorization": f"Bearer {ops.api_key}"}
            with httpx.Client(base_url=server.url, headers=headers, trust_env=False) as client:
                listed = client.get("/v1/ops/circuits")
                status = client.get("/v1/ops/status")
                refused = client.get(
                    "/v1/ops/circuits", headers={"Authorization": f"Bearer {merchant.api_key}"}
                )
            console, _ = signed_in(Api(server.url, ops.api_key))  # type: ignore[arg-type]
            try:
                overview = console.get("/ops/")
            finally:
                console.close()
        # What the API's metrics port serves (``payorch api --metrics-port``), read
        # in-process, before the container closes: a read after its engine is disposed
        # opens a connection nobody closes.
        scraped, _ = metrics.render(metrics.Role.API, database_gauges(container.read_only_uow))
    finally:
        container.close()

    assert listed.status_code == 200, listed.text
    [entry] = listed.json()["data"]
    assert entry["id"] == PLATFORM_CIRCUIT_KEY
    circuit = entry["circuit"]
    assert (circuit["state"], circuit["failures"], circuit["waiting_payments"]) == ("open", 3, 2)
    assert circuit["opened_at"] == circuit["since"] and circuit["next_probe_at"] is not None

    assert status.status_code == 200 and status.json()["connectors"] == [entry]
    # An open circuit is the system waiting a provider out, not something stuck.
    assert status.json()["healthy"] is True

    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/problem+json")

    gauge = f'payorch_circuit_state{{connector_account="{PLATFORM_CIRCUIT_KEY}"}} 2.0'
    assert gauge in scraped.decode()

    assert overview.status_code == 200
    assert f'id="circuit-{PLATFORM_CIRCUIT_KEY}"' in overview.text
    assert "open" in overview.text

    env = cli_environment(database_url, "memory://")
    as_json = run_payorch("status", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["connectors"] == [entry]
    human = run_payorch("status", env=env)
    # The table may fold a long cell over lines: read it without its frame and spaces.
    text = "".join(ch for ch in human.stdout if ch.isalnum() or ch in "_-:")
    assert "circuits" in text and PLATFORM_CIRCUIT_KEY in text and "open" in text
