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

import contextlib
import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import Celery

from orchestrator import tracing
from orchestrator.engine.publisher import BatchPublishFailed, PublishFailed, QueueState
from orchestrator.settings import Settings

if TYPE_CHECKING:
    from orchestrator.broker_batch import BatchPublisher

PAYMENTS_QUEUE = "payorch.payments"
# AMQP's reply code to a passive declare of a queue that does not exist.
QUEUE_NOT_FOUND = 404
PROCESS_PAYMENT = "payorch.process_payment"
PROCESS_OPERATION = "payorch.process_operation"
SWEEP = "payorch.sweep"
# The consumer's task module, named, not imported (see the module docstring).
TASK_MODULE = "workers.tasks"
# A consumer that stops answering (a frozen or partitioned worker) is declared dead by
# RabbitMQ after about two missed heartbeats; the messages it had taken and not acknowledged
# then go back to the queue.
BROKER_HEARTBEAT_SECONDS = 30
# The consumer step of a threads-pool worker that sets its prefetch count from the
# provider's latency (``workers.prefetch_limit``), named as data like TASK_MODULE.
ADAPTIVE_PREFETCH_STEP = "workers.prefetch_limit:AdaptivePrefetch"
# Where that step finds its floor (Settings.worker_prefetch_floor) in the app's conf.
PREFETCH_FLOOR_CONF = "payorch_prefetch_floor"
# The worker's consumer: Celery's, except that a broker refusing the worker's login or
# virtual host ends the worker instead of a restart loop (``workers.consumer``), named as
# data like TASK_MODULE.
CONSUMER_CLASS = "workers.consumer:Consumer"
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
        broker_heartbeat=BROKER_HEARTBEAT_SECONDS,
        worker_hijack_root_logger=False,
        worker_consumer=CONSUMER_CLASS,
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
        # Whether the transport confirms publishes (AMQP), read on first use.
        self._batching: bool | None = None

    def publish_process_payments(self, wakeups: Sequence[tuple[str, int]]) -> None:
        """Many ``process_payment`` wake-ups, one wait for their confirms (the dispatcher,
        the sweeper; orchestrator.broker_batch).  Raises BatchPublishFailed.

        Only AMQP has publisher confirms: on any other transport (the demo's and the
        embedded default's ``memory://``) a batch would wait for confirms that never come,
        so the wake-ups go one by one through ``send_task``."""
        from orchestrator.broker_batch import BatchPublisher

        if not self._confirms_batches():
            for confirmed, (payment_id, token) in enumerate(wakeups):
                try:
                    self.publish_process_payment(payment_id, token)
                except PublishFailed as error:
                    raise BatchPublishFailed(str(error), confirmed) from error
            return
        batch: BatchPublisher | None = getattr(self._batches, "publisher", None)
        if batch is None:
            batch = self._batches.publisher = BatchPublisher(self._app)
        batch.publish([(PROCESS_PAYMENT, payment_id, token) for payment_id, token in wakeups])

    def _confirms_batches(self) -> bool:
        if self._batching is None:
            try:
                driver = self._app.connection_for_write().transport.driver_type
            except Exception:  # an unknown or unloadable transport: not one we batch on
                driver = None
            self._batching = driver == "amqp"
        return self._batching

    def close_batches(self) -> None:
        batch: BatchPublisher | None = getattr(self._batches, "publisher", None)
        if batch is not None:
            batch.close()

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        try:
            # No publish retries here: the API must answer quickly even with the broker
            # down, and the sweeper is the retry for a lost wake-up.
            self._app.send_task(
                PROCESS_PAYMENT,
                args=[payment_id, lease_token],
                retry=False,
                # The payment's trace context, when the publisher has it (decision 0102):
                # the task's span joins it without the worker's read of the row.
                headers=tracing.message_headers(traceparent),
            )
        except Exception as error:  # kombu raises a zoo of transport errors
            raise PublishFailed(f"{type(error).__name__}: {error}") from error

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        try:
            self._app.send_task(PROCESS_OPERATION, args=[operation_id, lease_token], retry=False)
        except Exception as error:
            raise PublishFailed(f"{type(error).__name__}: {error}") from error

    def wake_up_queue(self) -> QueueState | None:
        """The wake-up queue's ready messages and consumers (a passive declare: one round
        trip, creates nothing).  Empty when the queue does not exist yet (nothing was ever
        queued); None when the broker cannot be asked."""
        try:
            with self._app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=2)
                channel = connection.channel()
                try:
                    declared = channel.queue_declare(queue=PAYMENTS_QUEUE, passive=True)
                except Exception as error:
                    # amqp's NotFound (untyped, so matched by its reply code).
                    if getattr(error, "reply_code", None) == QUEUE_NOT_FOUND:
                        return QueueState(ready=0, consumers=0)
                    raise
                finally:
                    with contextlib.suppress(Exception):
                        channel.close()
                return QueueState(
                    ready=int(declared.message_count), consumers=int(declared.consumer_count)
                )
        except Exception:  # kombu and amqp raise a zoo of transport errors
            return None

    def broker_reachable(self) -> bool:
        return self._probe.reachable()

    @functools.cached_property
    def _probe(self) -> BrokerProbe:
        return BrokerProbe(self._app)


class BrokerProbe:
    """``/readyz``'s broker check on one connection kept open between checks.

    A new AMQP connection per check (TCP, AMQP handshake, login) cost the broker a
    connection churn per load-balancer poll.  The kept connection answers a passive
    declare of ``amq.direct`` (every RabbitMQ has it): one round trip that fails when the
    broker is gone, even while the socket still looks open.  After a failure the connection
    is dropped and the next check opens a new one.  Checks are serialised: a burst of
    polls shares one connection and never opens several."""

    # The exchange every RabbitMQ declares (AMQP 0-9-1 §3.1.3.1): a passive declare of it is
    # a round trip that changes nothing.
    PROBE_EXCHANGE = "amq.direct"

    def __init__(self, app: Celery, *, timeout: float = 2.0) -> None:
        self._app = app
        self._timeout = timeout
        self._lock = threading.Lock()
        self._connection: Any = None

    def reachable(self) -> bool:
        # A check still running after the timeout (a broker that accepted the socket and
        # stopped answering) means "not reachable" to the checks behind it: they return
        # instead of queueing on the lock, so a hung broker cannot use up the API's threads.
        if not self._lock.acquire(timeout=self._timeout):
            return False
        try:
            try:
                if self._connection is None:
                    self._connection = self._app.connection_for_write()
                connection = self._connection
                connection.ensure_connection(max_retries=1, timeout=self._timeout)
                connection.default_channel.exchange_declare(
                    exchange=self.PROBE_EXCHANGE, type="direct", passive=True
                )
                return True
            except Exception:  # kombu raises a zoo of transport errors
                self._drop()
                return False
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.release()
