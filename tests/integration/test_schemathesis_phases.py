"""The API against its own OpenAPI document with every Schemathesis phase (issue 43).

``payorch api`` and ``payorch worker`` run as processes against a fresh PostgreSQL database
and a RabbitMQ vhost, the worker talking to the Stripe simulator; the database holds
payments in every status, a capture, a cancel, a refund, a webhook endpoint, a connector
account and a routing configuration.  Schemathesis's own command (``st run``) then runs the
examples, coverage, fuzzing and stateful phases twice: over the merchant's routes with a
merchant key, and over ``/v1/ops`` with an ops key.  Every check is on; the run must end
with no failure at all (a server error, a status code, content type, header or body the
document does not allow, a valid request refused, an invalid one accepted, an incomplete
``Allow``).

Bounded and deterministic: ``--generation-deterministic`` with a fixed seed, no example
database, one Schemathesis worker, ``MAX_EXAMPLES`` per operation and ``MAX_STEPS`` per
stateful scenario.  ``PAYORCH_CONFORMANCE_EXAMPLES`` raises the bound for a longer run by
hand (docs/testing.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.harness.conformance import Seeded, seed_every_status
from tests.harness.stack import running_stack, wait_for_output
from tests.support.processes import ProcessManager, free_port

MAX_EXAMPLES = int(os.environ.get("PAYORCH_CONFORMANCE_EXAMPLES", "8"))
MAX_STEPS = 6
SEED = 43
STRIPE_WEBHOOK_SECRET = "whsec_conformance"

# A valid request may still be refused for what no schema can say (the contract's answers):
# a reused Idempotency-Key with another body (422), an id of another client's or of nothing
# (404), a state the resource is not in (409), a stale If-Match (412).
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "412", "422", "429"]
# ... and where a schema-valid value can still be a 400: an opaque cursor this API never
# handed out, a webhook URL that fails the SSRF rules, an event id 'after' that does not
# exist, routing rules naming accounts the merchant does not have, an amount under the
# provider's minimum, a leap second Python cannot read, a Stripe event without Stripe's
# signature over its bytes.
MAY_BE_400 = [
    ("^/v1/payments$", "GET"),
    ("^/v1/ops/payments$", "GET"),
    ("^/v1/webhook_endpoints", "POST"),
    ("^/v1/events$", "GET"),
    ("^/v1/routing", "PUT"),
    ("^/v1/routing", "POST"),
    ("^/v1/ops/payments/retry$", "POST"),
    ("^/v1/providers/", "POST"),
]


@dataclass
class Conformance:
    api_url: str
    merchant_key: str
    ops_key: str
    seeded: Seeded


@pytest.fixture(scope="module")
def conformance(
    make_postgres_database: Callable[[], str],
    make_broker_url: Callable[[], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Conformance]:
    processes = ProcessManager(tmp_path_factory.mktemp("conformance-processes"))
    database_url = make_postgres_database()
    broker_url = make_broker_url()
    try:
        with running_stack(
            database_url, broker_url, stripe_webhook_secret=STRIPE_WEBHOOK_SECRET
        ) as stack:
            port = free_port()
            env = {
                **stack.env,
                "PAYORCH_STRIPE_WEBHOOK_SECRET": STRIPE_WEBHOOK_SECRET,
                # Webhook URLs on this machine, for the seeded endpoint (nothing delivers:
                # no relay runs).
                "PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
            }
            api = processes.payorch("api", "--port", str(port), name="api", env=env)
            wait_for_output(api, "api_listening", timeout=60)
            stack.start_worker(processes)
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(
                base_url=url,
                headers={"Authorization": f"Bearer {stack.merchant_key}"},
                timeout=30,
                trust_env=False,
            ) as client:
                seeded = seed_every_status(stack, client, "http://127.0.0.1:9/hooks")
            yield Conformance(url, stack.merchant_key, stack.ops_key, seeded)
            processes.stop_all()
    finally:
        processes.stop_all()


def _config(key: str, seeded: Seeded) -> str:
    """schemathesis.toml for one run: the key, the accepted answers, and the seeded ids of
    what no operation in the document creates (a capture, a cancel, a refund)."""
    lines = [
        f"seed = {SEED}",
        "workers = 1",
        # A loaded CI machine answers slowly, never wrongly: a slow answer is not a failure.
        "request-timeout = 60",
        "[generation]",
        f"max-examples = {MAX_EXAMPLES}",
        "deterministic = true",
        'database = "none"',
        "[headers]",
        f'Authorization = "Bearer {key}"',
        "[checks.positive_data_acceptance]",
        f"expected-statuses = {json.dumps(ACCEPTED)}",
        "[phases.stateful]",
        f"max-steps = {MAX_STEPS}",
        "[parameters]",
        f'"path.capture_id" = "{seeded.capture_id}"',
        f'"path.cancel_id" = "{seeded.cancel_id}"',
        f'"path.refund_id" = "{seeded.refund_id}"',
    ]
    for path, method in MAY_BE_400:
        lines += [
            "[[operations]]",
            f"include-path-regex = {json.dumps(path)}",
            f'include-method = "{method}"',
            "[operations.checks.positive_data_acceptance]",
            f"expected-statuses = {json.dumps([*ACCEPTED, '400'])}",
        ]
    return "\n".join(lines) + "\n"


def _run(conformance: Conformance, tmp_path: Path, key: str, *selection: str) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(key, conformance.seeded))
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(config),
        "--no-color",
        "run",
        f"{conformance.api_url}/openapi.json",
        "--phases=examples,coverage,fuzzing,stateful",
        "--checks=all",
        *selection,
    ]
    # In tmp_path: Schemathesis writes its cache (.schemathesis/) beside where it runs.
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        env=_quiet_environment(),
        cwd=tmp_path,
    )
    report = result.stdout[-20000:] + result.stderr[-4000:]
    assert result.returncode == 0, report
    # Not vacuous: every phase ran and requests were sent.
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in result.stdout, report
    counts = re.search(r"(\d+) generated, (\d+) passed", result.stdout)
    assert counts is not None and int(counts[1]) == int(counts[2]) > 100, report


def _quiet_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    env["NO_COLOR"] = "1"
    return env


def test_the_stack_holds_every_status(conformance: Conformance) -> None:
    assert set(conformance.seeded.payments) == {
        "succeeded",
        "failed",
        "requires_action",
        "requires_capture",
        "processing",
        "canceled",
        "needs_attention",
    }
    seeded = conformance.seeded
    assert all((seeded.refund_id, seeded.capture_id, seeded.cancel_id, seeded.endpoint_id))
    assert seeded.account_id


def test_every_seeded_payment_reads_as_documented_in_every_status(
    conformance: Conformance,
) -> None:
    """The fuzzer reaches a payment by an id it generated or a link it followed, rarely one
    in each status: every status is read here, by both roles, against the document."""
    with httpx.Client(base_url=conformance.api_url, timeout=30, trust_env=False) as client:
        document = client.get("/openapi.json").json()

        def read(path: str, key: str) -> Any:
            response = client.get(path, headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200, response.text
            responses = document["paths"][_template(path)]["get"]["responses"]
            schema = responses["200"]["content"]["application/json"]["schema"]
            jsonschema.validate(response.json(), {**schema, "components": document["components"]})
            return response.json()

        for status, payment_id in conformance.seeded.payments.items():
            read_status = read(f"/v1/payments/{payment_id}", conformance.merchant_key)["status"]
            # Only a client moves these; a payment waiting on the provider or the customer
            # may time out while the test runs (and is validated all the same).
            if status in STABLE:
                assert read_status == status, (payment_id, read_status)
            read(f"/v1/ops/payments/{payment_id}", conformance.ops_key)
        read("/v1/ops/leases", conformance.ops_key)
        read("/v1/ops/payments", conformance.ops_key)
        read("/v1/ops/audit", conformance.ops_key)


STABLE = {"succeeded", "failed", "canceled", "requires_capture", "needs_attention"}


def _template(path: str) -> str:
    return re.sub(r"/pay_[0-9a-f]{32}", "/{payment_id}", path)


def test_every_merchant_answer_matches_the_document_in_every_phase(
    conformance: Conformance, tmp_path: Path
) -> None:
    _run(conformance, tmp_path, conformance.merchant_key, "--exclude-path-regex=^/v1/ops/")


def test_every_ops_answer_matches_the_document_in_every_phase(
    conformance: Conformance, tmp_path: Path
) -> None:
    _run(conformance, tmp_path, conformance.ops_key, "--include-path-regex=^/v1/ops/")
