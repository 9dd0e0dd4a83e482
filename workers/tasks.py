"""Thin tasks: decode the message, call the orchestrator service, nothing else."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from workers.celery_app import PROCESS_PAYMENT

SWEEP = "payorch.sweep"


def sweep_beat_schedule(interval_seconds: float) -> dict[str, Any]:
    """Celery beat's schedule: one ``payorch.sweep`` per interval.  ``expires``: sweeps
    that waited in the queue longer than an interval (workers down, a backlog of payments
    ahead of them) are dropped, not run back to back; the next one does their work."""
    return {
        "payorch-sweep": {
            "task": SWEEP,
            "schedule": interval_seconds,
            "options": {"expires": interval_seconds},
        }
    }


def process_payment_task(self: Any, payment_id: str, lease_token: int) -> str:
    from orchestrator.services.processing import process_payment
    from workers.runtime import container

    result = process_payment(
        container(), payment_id, int(lease_token), interruptions=(SoftTimeLimitExceeded,)
    )
    return result.value


def sweep_task() -> dict[str, object]:
    from orchestrator.leases.sweeper import Sweeper
    from workers.runtime import container

    return Sweeper(container()).run_once().as_dict()


def register_tasks(app: Celery) -> None:
    # Module-level functions, registered by identity: Celery also adds every task it has
    # seen to each app created later in the process (the demo and the tests build several),
    # and only the same callable counts as the same task.
    app.task(name=PROCESS_PAYMENT, bind=True)(process_payment_task)
    app.task(name=SWEEP)(sweep_task)
