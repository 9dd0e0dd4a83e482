"""Thin tasks: decode the message, call the engine, nothing else.

Celery imports this module in a worker process (the app's ``include``, see
``orchestrator.broker``); importing it registers the tasks on every Celery app of the
process, the ones built before and after (``shared_task``)."""

from __future__ import annotations

from typing import Any

from celery import Celery, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from orchestrator.broker import PROCESS_OPERATION, PROCESS_PAYMENT, SWEEP, sweep_beat_schedule

__all__ = ["SWEEP", "register_tasks", "sweep_beat_schedule"]


def process_payment_task(self: Any, payment_id: str, lease_token: int) -> str:
    from orchestrator.engine.kinds.charge import process_payment
    from workers.runtime import container

    result = process_payment(
        container().runner(), payment_id, int(lease_token), interruptions=(SoftTimeLimitExceeded,)
    )
    return result.value


def process_operation_task(self: Any, operation_id: str, lease_token: int) -> str:
    from orchestrator.engine.kinds import process_operation
    from workers.runtime import container

    result = process_operation(
        container().runner(),
        operation_id,
        int(lease_token),
        interruptions=(SoftTimeLimitExceeded,),
    )
    return result.value


def sweep_task() -> dict[str, object]:
    from workers.runtime import container

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
