"""The broker seam: the Celery app's configuration, the task names, and the publisher.

The producer side of the queue lives here, inside the core, so that nothing in
``orchestrator`` imports ``workers`` (dependencies point inwards).  The task bodies live in
``workers.tasks``: the app names that module as data (``TASK_MODULE``, Celery's
``include``) and Celery imports it only in a process that runs a worker.  A publisher
sends tasks by name and never needs their code.

Every setting here serves one rule: a broker failure (message lost on a kill or a failed
publish, delivered twice after a connection loss) must end as "late" or "duplicate but
fenced", never as a double charge or a stuck payment.  The lease in the row does the
real work; these settings keep the broker from fighting it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import Celery

from orchestrator.engine.publisher import PublishFailed
from orchestrator.settings import Settings

if TYPE_CHECKING:
    from orchestrator.broker_batch import BatchPublisher

PAYMENTS_QUEUE = "payorch.payments"
PROCESS_PAYMENT = "payorch.process_payment"
PROCESS_OPERATION = "payorch.process_operation"
SWEEP = "payorch.sweep"
# The consumer's task module, named, not imported (see the module docstring).
TASK_MODULE = "workers.tasks"
# The consumer step of a threads-pool worker that sets its prefetch count from the
# provider's latency (``workers.prefetch_limit``), named as data like TASK_MODULE.
ADAPTIVE_PREFETCH_STEP = "workers.prefetch_limit:AdaptivePrefetch"
# Where that step finds its floor (Settings.worker_prefetch_floor) in the app's conf.
PREFETCH_FLOOR_CONF = "payorch_prefetch_floor"
# Celery's threads pool with an executor that reuses the thread idle the shortest
# (``workers.thread_pool``), under a pool name of its own.
THREADS_POOL_ALIAS = "payorch-threads"
THREADS_POOL_CLASS = "workers.thread_pool:TaskPool"


def create_celery_app(settings: Settings) -> Celery:
    app = Celery("payorch", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        include=[TASK_MODULE],
        # Ack only after the task returned: a worker killed mid-task leaves the message
        # unacked and the broker redelivers it (the claim then decides who may act).
        task_acks_late=True,
        # A pool child killed by a signal or OOM requeues its message too.  A poison
        # payment cannot loop forever: every claim counts an attempt on the record and
        # MAX_ATTEMPTS sends it to needs_attention.
        task_reject_on_worker_lost=True,
        # One message at a time per process: a prefetched message would sit behind a slow
        # payment while its dispatch lease runs out.
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        # On a broker connection loss the unacked messages are redelivered elsewhere;
        # cancelling our copies avoids running both (fencing would stop the loser anyway).
        worker_cancel_long_running_tasks_on_connection_loss=True,
        # Time limits inside the lease: the soft limit makes the task defer its work; the
        # hard limit kills it before the lease could expire under a running task.
        task_soft_time_limit=settings.task_soft_time_limit,
        task_time_limit=settings.task_time_limit,
        task_default_queue=PAYMENTS_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={
            # Publisher confirms: a publish returns only once RabbitMQ has the message, so
            # the API's "published" is true (and a failure is seen and counted).
            "confirm_publish": True,
            # One connection attempt per publish, bounded by broker_connection_timeout.
            # kombu's default keeps retrying for the whole timeout, which made every accept
            # wait seconds while the broker was down; the sweeper is the retry for a lost
            # wake-up.  (The worker's consumer reconnects under its own, unbounded policy.)
            "max_retries": 0,
        },
        broker_connection_timeout=settings.publish_timeout_seconds,
        broker_connection_retry_on_startup=True,
        broker_heartbeat=30,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    return app


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


class CeleryPublisher:
    """Publishes the engine's tasks by name."""

    def __init__(self, app: Celery) -> None:
        self._app = app
        # One BatchPublisher (its own connection and channel) per thread that batches.
        self._batches = threading.local()

    def publish_process_payments(self, wakeups: Sequence[tuple[str, int]]) -> None:
        """Many ``process_payment`` wake-ups, one wait for their confirms (the dispatcher;
        orchestrator.broker_batch).  Raises BatchPublishFailed."""
        from orchestrator.broker_batch import BatchPublisher

        batch: BatchPublisher | None = getattr(self._batches, "publisher", None)
        if batch is None:
            batch = self._batches.publisher = BatchPublisher(self._app)
        batch.publish([(PROCESS_PAYMENT, payment_id, token) for payment_id, token in wakeups])

    def close_batches(self) -> None:
        batch: BatchPublisher | None = getattr(self._batches, "publisher", None)
        if batch is not None:
            batch.close()

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

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        try:
            self._app.send_task(PROCESS_OPERATION, args=[operation_id, lease_token], retry=False)
        except Exception as error:
            raise PublishFailed(f"{type(error).__name__}: {error}") from error

    def broker_reachable(self) -> bool:
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
            return True
        except Exception:
            return False
