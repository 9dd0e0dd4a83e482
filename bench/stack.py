"""The stack under measurement, as separate processes: the API (``bench.server``: what
``payorch api`` serves, plus the bare route), ``payorch worker`` (``bench.worker``: plus the
no-op task), ``payorch sweeper`` and ``payorch provider-sim``.

Everything measured runs in its own process, never in the bench's: the load generator must
not share an interpreter (and its GIL) with what it measures.  The bench process keeps a
container of its own to create the API client and to read the database.

    production_stack(...)   PostgreSQL + RabbitMQ (its own database and vhost) + simulator
    sqlite_stack(...)       the embedded default's storage: an SQLite file, Celery's
                            in-memory transport (for the accept path: no worker needed)
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import services
from bench.noop import ADDRESS_ENV
from devtools.simulator import SimulatorAdmin
from orchestrator.bootstrap import Container, bootstrap
from orchestrator.db.migrate import upgrade
from orchestrator.db.tables import payments
from orchestrator.domain.model import Role
from orchestrator.engine.publisher import NullPublisher
from orchestrator.services.accept import DISPATCH_OWNER
from orchestrator.services.api_keys import create_client
from orchestrator.settings import Settings
from tests.support.processes import (
    ManagedProcess,
    ProcessManager,
    free_port,
    payorch_command,
    wait_for_http,
)

SIMULATOR_API_KEY = "sk_test_payorch_bench"
ROOT = Path(__file__).resolve().parent.parent
FINISHED = ("succeeded", "failed")


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@dataclass
class Stack:
    settings: Settings
    env: dict[str, str]
    processes: ProcessManager
    container: Container
    merchant_key: str
    simulator_url: str
    api_url: str = ""

    # -- processes --------------------------------------------------------------------------

    def start_api(self) -> ManagedProcess:
        port = free_port()
        api = self.processes.start(
            python_module("bench.server", "--port", str(port)), name="api", env=self.env
        )
        self.api_url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{self.api_url}/healthz", timeout=60, process=api)
        return api

    def start_worker(
        self, concurrency: int, *, name: str = "worker", wait: bool = True
    ) -> ManagedProcess:
        """``payorch worker --concurrency N --pool prefork`` (scenarios 2 and 4)."""
        return self.start_worker_with(
            (f"--concurrency={concurrency}", "--pool=prefork"), name=name, wait=wait
        )

    def start_worker_with(
        self,
        args: Sequence[str],
        *,
        name: str = "worker",
        wait: bool = True,
        env: dict[str, str] | None = None,
    ) -> ManagedProcess:
        """``payorch worker ARGS`` (none: the default worker) with the bench's no-op tasks."""
        worker = self.processes.start(
            python_module("bench.worker", *args, "--loglevel=INFO"),
            name=name,
            env={**self.env, **(env or {})},
        )
        if wait:
            wait_for_output(worker, "ready.", timeout=60)
        return worker

    def start_sweeper(self) -> ManagedProcess:
        return self.processes.start(payorch_command("sweeper"), name="sweeper", env=self.env)

    def start_dispatcher(self) -> ManagedProcess:
        """``payorch dispatcher``: NOTIFY in, tasks out (what the sweeper also hosts)."""
        dispatcher = self.processes.start(
            payorch_command("dispatcher"), name="dispatcher", env=self.env
        )
        wait_for_output(dispatcher, "dispatcher_listening", timeout=60)
        return dispatcher

    def count_noops_to(self, address: str) -> None:
        """Workers started from now on report their no-ops to ``address``."""
        self.env[ADDRESS_ENV] = address

    # -- the database and the provider ------------------------------------------------------

    def count_finished(self) -> int:
        with self.container.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(payments)
                    .where(payments.c.status.in_(FINISHED))
                ).scalar_one()
            )

    def count_in_flight(self) -> int:
        """Payments a worker holds a lease on right now (not the dispatch lease of an
        accepted payment waiting in the queue)."""
        with self.container.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count())
                    .select_from(payments)
                    .where(
                        payments.c.status == "processing",
                        payments.c.lease_owner.is_not(None),
                        payments.c.lease_owner != DISPATCH_OWNER,
                    )
                ).scalar_one()
            )

    def completion_times(self) -> list[float]:
        with self.container.engine.connect() as conn:
            rows = conn.execute(
                sa.select(payments.c.completed_at).where(payments.c.completed_at.is_not(None))
            ).scalars()
            return [value.timestamp() for value in rows]

    def simulator(self) -> SimulatorAdmin:
        return SimulatorAdmin(self.simulator_url)


def wait_for_output(process: ManagedProcess, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.output():
        if process.poll() is not None:
            raise RuntimeError(f"{process.name} exited:\n{process.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.name} never printed {text!r}:\n{process.tail()}")
        time.sleep(0.05)


def bench_environment(values: dict[str, Any]) -> dict[str, str]:
    env = {f"PAYORCH_{name.upper()}": str(value) for name, value in values.items()}
    # `python -m bench.…` from any working directory (processes run in their log directory).
    env["PYTHONPATH"] = str(ROOT)
    return env


def _start_simulator(processes: ProcessManager, faults: tuple[str, ...]) -> str:
    port = free_port()
    fault_args = [arg for spec in faults for arg in ("--fault", spec)]
    simulator = processes.start(
        payorch_command("provider-sim", "--port", str(port), "--stall-seconds", "30", *fault_args),
        name="provider-sim",
    )
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/_sim/health", timeout=60, process=simulator)
    return url


@contextmanager
def _stack(
    cleanup: ExitStack,
    processes: ProcessManager,
    *,
    database_url: str,
    broker_url: str,
    simulator_url: str,
    overrides: dict[str, Any],
) -> Iterator[Stack]:
    values: dict[str, Any] = {
        # Production settings, except what points at the bench's own database, broker and
        # provider.  ENV=test: it checks the secret like production does, but allows the
        # simulator (which production refuses).
        "env": "test",
        "secret_key": secrets.token_urlsafe(32),
        "database_url": database_url,
        "broker_url": broker_url,
        "stripe_api_base": simulator_url,
        "stripe_api_key": SIMULATOR_API_KEY,
        **overrides,
    }
    settings = Settings(**values)
    upgrade(database_url)
    container = bootstrap(settings, publisher=NullPublisher())
    cleanup.callback(container.close)
    merchant_key = create_client(container.uow, "bench-merchant", Role.MERCHANT).api_key
    yield Stack(
        settings=settings,
        env=bench_environment(values),
        processes=processes,
        container=container,
        merchant_key=merchant_key,
        simulator_url=simulator_url,
    )


@contextmanager
def production_stack(
    log_dir: Path, *, simulator_faults: tuple[str, ...] = (), **overrides: Any
) -> Iterator[Stack]:
    """A database and a vhost of its own, and a zero-latency simulator; the scenario starts
    the API, workers and sweeper.  Everything is stopped and dropped at the end."""
    with ExitStack() as cleanup:
        database_url = cleanup.enter_context(services.scratch_database())
        broker_url = cleanup.enter_context(services.scratch_vhost())
        processes = ProcessManager(log_dir)
        cleanup.callback(processes.stop_all)
        simulator_url = _start_simulator(processes, simulator_faults)
        with _stack(
            cleanup,
            processes,
            database_url=database_url,
            broker_url=broker_url,
            simulator_url=simulator_url,
            overrides=overrides,
        ) as stack:
            yield stack


@contextmanager
def sqlite_stack(log_dir: Path, directory: Path, **overrides: Any) -> Iterator[Stack]:
    """The embedded default's storage for a standalone API: an SQLite file and Celery's
    in-memory transport (messages stay in the API process; no worker reads them)."""
    with ExitStack() as cleanup:
        processes = ProcessManager(log_dir)
        cleanup.callback(processes.stop_all)
        with _stack(
            cleanup,
            processes,
            database_url=f"sqlite:///{directory / 'payorch.sqlite3'}",
            broker_url="memory://",
            simulator_url="http://127.0.0.1:9",  # never called: no worker runs
            overrides=overrides,
        ) as stack:
            yield stack
