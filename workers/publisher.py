"""Publishing the process-payment task through Celery."""

from __future__ import annotations

from celery import Celery

from orchestrator.services.dispatch import PublishFailed
from workers.celery_app import PROCESS_PAYMENT


class CeleryPublisher:
    def __init__(self, app: Celery) -> None:
        self._app = app

    def publish_process_payment(self, payment_id: str, lease_token: int) -> None:
        try:
            # No publish retries here: the API must answer quickly even with the broker
            # down, and the sweeper is the retry for a lost wake-up.
            self._app.send_task(
                PROCESS_PAYMENT,
                args=[payment_id, lease_token],
                retry=False,
            )
        except Exception as error:  # kombu raises a zoo of transport errors
            raise PublishFailed(f"{type(error).__name__}: {error}") from error

    def broker_reachable(self) -> bool:
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
            return True
        except Exception:
            return False
