"""Thin tasks: decode the message, call the engine, nothing else; and the process's
container they call it with.

Celery imports this module in a worker process (the app's ``include``, see
``orchestrator.broker``); importing it registers the tasks on every Celery app of the
process, the ones built before and after (``shared_task``).

The container is built lazily, after the pool forked: a SQLAlchemy engine must not cross a
fork (two processes on one socket corrupt the protocol), so each pool child builds its own
on first use.

While traces are on (``payorch worker`` set them up before Celery imported this module),
importing it also instruments the tasks: ``trace_tasks``, decision 0102."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from celery import Celery, shared_task, signals
from celery.exceptions import SoftTimeLimitExceeded

from orchestrator import tracing
from orchestrator.broker import PROCESS_OPERATION, PROCESS_PAYMENT, SWEEP, sweep_beat_schedule
from workers.trace_join import payment_trace_joiner

if TYPE_CHECKING:
    from orchestrator.bootstrap import Container

__all__ = ["SWEEP", "container", "install_container", "register_tasks", "sweep_beat_schedule"]

_container: Container | None = None
_container_pid: int | None = None


def container() -> Container:
    global _container, _container_pid
    if _container is None or _container_pid != os.getpid():
        from orchestrator.bootstrap import bootstrap

        _container = bootstrap()
        _container_pid = os.getpid()
    return _container


def install_container(prebuilt: Container) -> None:
    """Use an already built container (the embedded demo runs workers in-process)."""
    global _container, _container_pid
    _container = prebuilt
    _container_pid = os.getpid()


def process_payment_task(self: Any, payment_id: str, lease_token: int) -> str:
    from orchestrator.engine.kinds.charge import process_payment

    result = process_payment(
        container().runner(), payment_id, int(lease_token), interruptions=(SoftTimeLimitExceeded,)
    )
    return result.value


def process_operation_task(self: Any, operation_id: str, lease_token: int) -> str:
    from orchestrator.engine.kinds import process_operation

    result = process_operation(
        container().runner(),
        operation_id,
        int(lease_token),
        interruptions=(SoftTimeLimitExceeded,),
    )
    return result.value


def sweep_task() -> dict[str, object]:
    return container().sweeper().run_once().as_dict()


def register_tasks(app: Celery) -> None:
    # Module-level functions, registered by identity: Celery also adds every task it has
    # seen to each app created later in the process (the demo and the tests build several),
    # and only the same callable counts as the same task.
    app.task(name=PROCESS_PAYMENT, bind=True)(process_payment_task)
    app.task(name=PROCESS_OPERATION, bind=True)(process_operation_task)
    app.task(name=SWEEP)(sweep_task)


shared_task(name=PROCESS_PAYMENT, bind=True)(process_payment_task)
shared_task(name=PROCESS_OPERATION, bind=True)(process_operation_task)
shared_task(name=SWEEP)(sweep_task)


def _stored_traceparent(payment_id: str) -> str | None:
    with container().lookup_uow() as unit:
        return unit.payments.traceparent(payment_id)


def _flush_spans(**_signal: Any) -> None:
    # A prefork pool's child leaves without atexit: its last spans go now or never.
    tracing.flush()


def trace_tasks() -> None:
    """Task spans, in a worker process whose traces are on (``payorch worker`` set them up
    before Celery imported this module).  The row's trace context is put in the request
    before the instrumentation's span starts: receivers run in the order connected."""
    if not tracing.enabled():
        return
    signals.task_prerun.connect(payment_trace_joiner(_stored_traceparent), weak=False)
    tracing.instrument_celery()
    signals.worker_process_shutdown.connect(_flush_spans, weak=False)


trace_tasks()
