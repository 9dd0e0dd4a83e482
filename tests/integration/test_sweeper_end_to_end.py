"""The sweeper in the real stack (issue 5's acceptance): PostgreSQL, RabbitMQ, the provider
simulator, the API, and real ``payorch worker`` / ``payorch sweeper`` processes.

* Payments accepted while the broker is down are durable (202) though their wake-up was
  lost; once the broker is back, the sweeper re-queues them and each is charged once.
* A payment parked in needs_attention moves no money until an operator retries it, and
  then completes exactly once.
* With Celery beat instead of the sweeper loop, the workers run ``payorch.sweep`` and the
  same recovery happens.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from orchestrator.bootstrap import bootstrap
from orchestrator.engine.publisher import NullPublisher
from tests.harness.seeds import accept, new_merchant
from tests.harness.stack import Stack, running_stack

BROKER_OUTAGE_PAYMENTS = 50
PARKED_AMOUNT = 1377


@pytest.fixture
def stack(make_postgres_database, make_broker_url) -> Iterator[Stack]:
    # A short dispatch lease: a lost wake-up is re-queued two seconds after its accept.
    with running_stack(
        make_postgres_database(),
        make_broker_url(),
        dispatch_lease_seconds=2.0,
        max_attempts=3,
    ) as built:
        yield built


@pytest.fixture
def outage_stack(make_postgres_database, service_control) -> Iterator[Stack]:
    """Like ``stack``, on the session's private RabbitMQ node: the one the test stops."""
    with running_stack(
        make_postgres_database(),
        service_control.make_broker_url(),
        dispatch_lease_seconds=2.0,
        max_attempts=3,
    ) as built:
        yield built


def accept_while_broker_down(stack: Stack, count: int) -> list[httpx.Response]:
    """Concurrent merchants: each accept waits for the failed publish."""
    body = {"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}

    def post(n: int) -> httpx.Response:
        with stack.client() as client:
            return client.post(
                "/v1/payments", json=body, headers={"Idempotency-Key": f"outage-{n}"}
            )

    with ThreadPoolExecutor(max_workers=10) as pool:
        return list(pool.map(post, range(count)))


def wait_all_final(stack: Stack, ids: list[str], timeout: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    final: dict[str, dict] = {}
    while len(final) < len(ids):
        for payment_id in ids:
            if payment_id not in final:
                payment = stack.payment(payment_id)
                if payment["status"] in ("succeeded", "failed"):
                    final[payment_id] = payment
        if len(final) < len(ids):
            if time.monotonic() > deadline:
                missing = [stack.record(i) for i in ids if i not in final][:3]
                raise AssertionError(
                    f"{len(ids) - len(final)} of {len(ids)} payments not final after "
                    f"{timeout}s; e.g. {missing}"
                )
            time.sleep(0.5)
    return final


def test_payments_accepted_while_the_broker_is_down_complete_once_it_is_back(
    outage_stack, processes, service_control
):
    stack = outage_stack
    sweeper = stack.start_sweeper(processes)

    with service_control.broker_stopped():
        responses = accept_while_broker_down(stack, BROKER_OUTAGE_PAYMENTS)
        # The sweeper keeps taking the expired dispatch leases over and failing to
        # publish: each failure leaves a dispatch lease that expires back to it.
        time.sleep(3.0)

    assert [r.status_code for r in responses] == [202] * BROKER_OUTAGE_PAYMENTS
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == BROKER_OUTAGE_PAYMENTS
    stack.start_worker(processes, concurrency=4)

    final = wait_all_final(stack, ids, timeout=180)

    assert {p["status"] for p in final.values()} == {"succeeded"}
    for payment_id in ids:
        assert stack.movements(payment_id) == 1, payment_id
        assert stack.outcome_rows(payment_id) == 1, payment_id
        assert stack.ledger_sum(payment_id) == 0, payment_id
    assert sweeper.running, sweeper.tail()


def test_a_parked_payment_completes_once_after_an_operator_retries_it(stack, processes):
    # Every confirm fails with a 500 before the provider acts: unknown outcomes pile up
    # until the worker parks the payment for an operator.  Nothing moves meanwhile.
    rule = stack.simulator.admin.add_fault(f"confirm:error_500_before:amounts={PARKED_AMOUNT}")
    stack.start_worker(processes)
    stack.start_sweeper(processes)
    accepted = stack.pay("parked-1", amount=PARKED_AMOUNT)

    parked = stack.wait_for_record(
        accepted["id"], lambda r: r.status.value == "needs_attention", timeout=120
    )
    assert stack.payment(accepted["id"])["status"] == "needs_attention"
    assert stack.movements(accepted["id"]) == 0
    assert parked.last_error

    stack.simulator.admin.remove_fault(rule["id"])
    with stack.client(stack.ops_key) as ops:
        retried = ops.post(
            f"/v1/ops/payments/{accepted['id']}/retry", json={"reason": "provider recovered"}
        )
    assert retried.status_code == 200, retried.text
    assert retried.json()["published"] is True

    final = stack.wait_final(accepted["id"], timeout=60)

    assert final["status"] == "succeeded"
    assert stack.movements(accepted["id"]) == 1
    assert stack.outcome_rows(accepted["id"]) == 1
    with stack.client(stack.ops_key) as ops:
        audit = ops.get("/v1/ops/audit", params={"payment_id": accepted["id"]}).json()["data"]
    assert [(e["action"], e["actor_name"]) for e in audit] == [("retry", "ops")]


def test_celery_beat_has_the_workers_sweep_when_no_sweeper_loop_runs(
    stack, processes, tmp_path: Path
):
    # A payment whose wake-up never reached the broker (accepted with no publisher, and
    # no NOTIFY for the stack's dispatcher).
    settings = stack.container.settings.model_copy(update={"wake_up": "publish"})
    lost = bootstrap(settings, publisher=NullPublisher())
    try:
        record = accept(lost, new_merchant(lost, "beat-merchant"), "lost-wake-up")
    finally:
        lost.close()
    stack.start_worker(processes)
    beat = processes.payorch(
        "beat", "--schedule-file", str(tmp_path / "beat-schedule"), name="beat", env=stack.env
    )

    final = stack.wait_for_record(record.id, lambda r: r.status.is_final, timeout=60)

    assert final.status.value == "succeeded"
    assert stack.movements(record.id) == 1
    assert final.lease_token >= record.lease_token + 2  # the sweep's takeover, then a claim
    beat.stop()
    # Beat's output, like every process's, is one JSON object per line (no banner).
    beat_lines = beat.output().splitlines()
    assert beat_lines and all(isinstance(json.loads(line), dict) for line in beat_lines)
