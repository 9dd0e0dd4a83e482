"""Thin tasks: decode the message, call the orchestrator service, nothing else."""

from __future__ import annotations

from typing import Any

from celery import Celery

from workers.celery_app import PROCESS_PAYMENT


def register_tasks(app: Celery) -> None:
    @app.task(name=PROCESS_PAYMENT, bind=True)  # type: ignore[untyped-decorator]
    def process_payment(self: Any, payment_id: str, lease_token: int) -> str:
        from workers.runtime import container

        from orchestrator.services.processing import process_payment as run

        return run(container(), payment_id, lease_token).value
