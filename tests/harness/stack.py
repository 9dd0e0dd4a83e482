"""The production stack for end-to-end tests: real PostgreSQL, a real RabbitMQ vhost, the
provider simulator, the API, and real ``payorch worker`` / ``payorch sweeper`` processes.

The simulator and the API run in this process (threads): nothing a test does to a worker
touches them.  Workers and sweepers are subprocesses, so they can be killed and paused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import sqlalchemy as sa

from devtools.simulator import RunningSimulator, SimulatorConfig, start_in_thread
from orchestrator.api.app import create_app
from orchestrator.bootstrap import Container, bootstrap
from orchestrator.db.migrate import upgrade
from orchestrator.db.tables import ledger_lines, payment_outcomes, payments
from orchestrator.domain.model import PaymentRecord, Role
from orchestrator.domain.operations import OperationRecord
from orchestrator.engine.circuit_hold import CircuitHold
from orchestrator.engine.dispatcher import start_in_thread as start_dispatcher
from orchestrator.services.api_keys import create_client
from tests.harness.containers import TEST_SECRET_KEY, test_settings
from tests.harness.server import ServerThread
from tests.replay.stripe_schema import AnswerWatch
from tests.support.processes import ManagedProcess, ProcessManager

SIMULATOR_KEY = "sk_test_payorch_e2e"
FINAL = {"succeeded", "failed", "canceled"}

# Short leases keep recovery tests quick.  The order the settings validate still holds:
# provider timeout (1.5 s) < soft limit (0.6 x 6 s) < hard limit (0.8 x 6 s) < lease (6 s).
E2E_SETTINGS: dict[str, Any] = {
    "lease_seconds": 6.0,
    "dispatch_lease_seconds": 6.0,
    "provider_timeout_seconds": 1.5,
    "provider_connect_timeout_seconds": 1.0,
    "sweep_interval_seconds": 0.5,
    "retry_base_seconds": 0.2,
    "retry_cap_seconds": 2.0,
    "max_in_task_wait_seconds": 2.5,
    "max_attempts": 6,
}


def _env_value(value: Any) -> str:
    return str(value)


@dataclass
class Stack:
    database_url: str
    broker_url: str
    simulator: RunningSimulator
    api_url: str
    container: Container
    merchant_key: str
    ops_key: str
    env: dict[str, str]
    owned: list[ManagedProcess] = field(default_factory=list)

    # -- processes --------------------------------------------------------------------------

    def start_worker(
        self,
        processes: ProcessManager,
        *,
        name: str = "worker",
        pool: str | None = None,
        concurrency: int | None = None,
        wait: bool = True,
    ) -> ManagedProcess:
        """``payorch worker``; without ``pool`` or ``concurrency``, the command's defaults
        (what an operator who passes no flags runs)."""
        options = [f"--concurrency={concurrency}"] if concurrency is not None else []
        options += [f"--pool={pool}"] if pool is not None else []
        worker = processes.payorch("worker", *options, "--loglevel=INFO", name=name, env=self.env)
        if wait:
            wait_for_output(worker, "ready.", timeout=60)
        return worker

    def start_sweeper(
        self, processes: ProcessManager, *, name: str = "sweeper", wait: bool = True
    ) -> ManagedProcess:
        """``payorch sweeper``; with ``wait``, once it has said it started: it checks the
        database and the broker first (decision 0100), so a test that stops one right
        after must not stop it before that check."""
        sweeper = processes.payorch("sweeper", name=name, env=self.env)
        if wait:
            wait_for_output(sweeper, '"sweeper_started"', timeout=60)
        return sweeper

    # -- the API ----------------------------------------------------------------------------

    def client(self, api_key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url,
            headers={"Authorization": f"Bearer {api_key or self.merchant_key}"},
            timeout=30,
            trust_env=False,
        )

    def pay(
        self,
        key: str,
        *,
        amount: int = 1000,
        payment_method: str = "pm_card_visa",
        currency: str = "usd",
        **fields: Any,
    ) -> dict[str, Any]:
        body = {"amount": amount, "currency": currency, "payment_method": payment_method}
        body.update(fields)
        with self.client() as client:
            response = client.post("/v1/payments", json=body, headers={"Idempotency-Key": key})
        assert response.status_code in (200, 202), response.text
        result: dict[str, Any] = response.json()
        return result

    def payment(self, payment_id: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.get(f"/v1/payments/{payment_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def wait_final(self, payment_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            payment = self.payment(payment_id)
            if payment["status"] in FINAL:
                return payment
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"payment {payment_id} not final after {timeout}s: {payment}\n"
                    f"record: {self.record(payment_id)}\n"
                    f"provider requests: {self.simulator.admin.requests(record_id=payment_id)}"
                )
            time.sleep(0.2)

    # -- the database and the provider ------------------------------------------------------

    def record(self, payment_id: str) -> PaymentRecord:
        with self.container.uow() as uow:
            record = uow.payments.get(payment_id)
        assert record is not None
        return record

    def wait_for_record(
        self, payment_id: str, predicate: Callable[[PaymentRecord], bool], timeout: float = 30.0
    ) -> PaymentRecord:
        deadline = time.monotonic() + timeout
        while True:
            record = self.record(payment_id)
            if predicate(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"record never matched: {record}")
            time.sleep(0.05)

    def outcome_rows(self, payment_id: str) -> int:
        return self._count(payment_outcomes, payment_id)

    def ledger_sum(self, payment_id: str) -> int:
        with self.container.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(ledger_lines.c.amount), 0)).where(
                        ledger_lines.c.payment_id == payment_id
                    )
                ).scalar_one()
            )

    def ledger_lines(self, payment_id: str) -> int:
        return self._count(ledger_lines, payment_id)

    def _count(self, table: sa.Table, payment_id: str) -> int:
        with self.container.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(table)
                    .where(table.c.payment_id == payment_id)
                ).scalar_one()
            )

    def records_for_key(self, key: str) -> int:
        with self.container.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(payments)
                    .where(payments.c.idempotency_key == key)
                ).scalar_one()
            )

    def movements(self, payment_id: str) -> int:
        return int(self.simulator.admin.movements()["by_record"].get(payment_id, 0))

    # -- refunds ----------------------------------------------------------------------------

    def refund(self, payment_id: str, key: str, **body: Any) -> dict[str, Any]:
        with self.client() as client:
            response = client.post(
                f"/v1/payments/{payment_id}/refunds", json=body, headers={"Idempotency-Key": key}
            )
        assert response.status_code in (200, 202), response.text
        result: dict[str, Any] = response.json()
        return result

    def refund_state(self, refund_id: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.get(f"/v1/refunds/{refund_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def wait_refund_final(self, refund_id: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            refund = self.refund_state(refund_id)
            if refund["status"] in FINAL:
                return refund
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"refund {refund_id} not final after {timeout}s: {refund}\n"
                    f"record: {self.operation(refund_id)}"
                )
            time.sleep(0.2)

    def operation(self, operation_id: str) -> OperationRecord:
        with self.container.uow() as uow:
            record = uow.operations.get(operation_id)
        assert record is not None
        return record

    def wait_for_operation(
        self,
        operation_id: str,
        predicate: Callable[[OperationRecord], bool],
        timeout: float = 30.0,
    ) -> OperationRecord:
        deadline = time.monotonic() + timeout
        while True:
            record = self.operation(operation_id)
            if predicate(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"operation never matched: {record}")
            time.sleep(0.05)

    def refunds_at_provider(self, refund_id: str) -> int:
        """Refunds the provider made that carry our refund's id."""
        refunds = self.simulator.admin.movements()["refunds"]
        return int(refunds["by_refund_id"].get(refund_id, 0))

    def provider_requests(self, payment_id: str) -> list[dict[str, Any]]:
        return self.simulator.admin.requests(record_id=payment_id)


def wait_for_output(process: ManagedProcess, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        if process.poll() is not None:
            raise AssertionError(f"{process.name} exited:\n{process.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{process.name} never printed {text!r}:\n{process.tail()}")
        time.sleep(0.1)


@contextmanager
def running_stack(
    database_url: str,
    broker_url: str,
    *,
    simulator_config: SimulatorConfig | None = None,
    dispatcher: bool = True,
    **overrides: Any,
) -> Iterator[Stack]:
    """Everything but the workers and sweepers, which tests start (and kill) themselves.
    ``dispatcher=False``: no dispatcher in this process (a sweeper still hosts one)."""
    upgrade(database_url)
    watch = AnswerWatch()
    simulator = start_in_thread(
        replace(simulator_config or SimulatorConfig(seed=1), answer_observer=watch)
    )
    values = {
        **E2E_SETTINGS,
        "broker_url": broker_url,
        "stripe_api_base": simulator.url,
        "stripe_api_key": SIMULATOR_KEY,
        **overrides,
    }
    settings = test_settings(database_url, **values)
    container = bootstrap(settings)
    env = {
        "PAYORCH_ENV": "test",
        "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
        "PAYORCH_DATABASE_URL": database_url,
        "PAYORCH_LOG_LEVEL": "INFO",
        "PAYORCH_DB_POOL_SIZE": "3",
        "PAYORCH_DB_MAX_OVERFLOW": "2",
        **{f"PAYORCH_{k.upper()}": _env_value(v) for k, v in values.items()},
    }
    merchant_key = create_client(container.uow, "merchant", Role.MERCHANT).api_key
    ops_key = create_client(container.uow, "ops", Role.OPS).api_key
    stop_dispatcher = threading.Event()
    dispatcher_thread = None
    if dispatcher and settings.wake_up_mode == "notify":
        # The dispatcher runs beside the API, as the API does (a thread of this process):
        # tests start and kill workers and sweepers without losing the fast wake-up.  A
        # sweeper a test starts hosts one too, and waits as the standby.
        running, dispatcher_thread = start_dispatcher(
            database_url,
            container.publisher,
            name="test-dispatcher",
            stop=stop_dispatcher,
            circuit_hold=CircuitHold.of(container.settings),
        )
        if not running.listening.wait(60):
            raise AssertionError("the test dispatcher never started listening")
    try:
        with ServerThread(create_app(container)) as api:
            yield Stack(
                database_url=database_url,
                broker_url=broker_url,
                simulator=simulator,
                api_url=api.url,
                container=container,
                merchant_key=merchant_key,
                ops_key=ops_key,
                env=env,
            )
    finally:
        stop_dispatcher.set()
        if dispatcher_thread is not None:
            dispatcher_thread.join(timeout=10)
        container.close()
        simulator.stop()
    # Every simulator answer the workers saw must be one the real Stripe could send.
    watch.assert_clean()
