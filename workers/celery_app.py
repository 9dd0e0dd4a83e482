"""The Celery app, configured for at-least-once delivery with exactly-once effect.

Every setting here serves one rule: a broker failure (message lost on a kill or a failed
publish, delivered twice after a connection loss) must end as "late" or "duplicate but
fenced", never as a double charge or a stuck payment.  The lease in the row does the
real work; these settings keep the broker from fighting it.
"""

from __future__ import annotations

from celery import Celery

from orchestrator.settings import Settings

PAYMENTS_QUEUE = "payorch.payments"
PROCESS_PAYMENT = "payorch.process_payment"


def create_celery_app(settings: Settings) -> Celery:
    app = Celery("payorch", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
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
    from workers.tasks import register_tasks

    register_tasks(app)
    return app
