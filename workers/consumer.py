"""The worker's consumer: Celery's own, except that a broker which refuses this worker ends
it (decision 0100).

Celery retries every failed connection.  That is right for a broker that went away (a
restart, a network blip): "connection refused" and "connection reset" are retried with a
growing interval (2 s, 4 s, … 30 s), one line each, and the worker takes tasks again when
the broker is back.  It is wrong for a broker that answers and says no: a virtual host
deleted (``530 NOT_ALLOWED``) or a user whose password or permissions changed (``403
ACCESS_REFUSED``).  Those fail the handshake at once, with no interval, so Celery restarts
its consumer five times a second and logs a ``RestartFreqExceeded`` traceback every
second, for ever, while the worker looks alive and takes nothing.

Such a refusal (at the start it is the start check's, ``orchestrator.broker_check``; this is
the same refusal met later) is logged once as ``worker_broker_refused`` with the broker
(password hidden), the broker's words and what to check, and the worker shuts down warm
with exit status 69 (``EX_UNAVAILABLE``).  Its supervisor restarts it; each start checks
the broker again and says the same cause, until someone fixes the URL or the broker.

Celery's reconnect is not endless either: after ``broker_connection_max_retries`` failed
attempts it gives up with an "Unrecoverable error" traceback and exit status 1.  That end
is ``worker_broker_lost``, one line, and exit 69 too.
"""

from __future__ import annotations

import os

import amqp.exceptions
from celery.exceptions import WorkerShutdown
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu.exceptions import OperationalError as KombuOperationalError

from orchestrator.broker_check import BROKER_HINT, shown_broker_url
from orchestrator.logging import get_logger

log = get_logger("payorch.worker")

# What the broker says when it refuses this connection's identity or target, not its
# timing: retrying cannot help.  (Connection refused or reset, a timeout, a broker
# shutting down (320) are not here: Celery retries them.)
REFUSALS: tuple[type[Exception], ...] = (
    amqp.exceptions.NotAllowed,  # 530: no such virtual host, or not allowed to use it
    amqp.exceptions.AccessRefused,  # 403: login refused (user, password)
)


def is_refusal(exc: BaseException) -> bool:
    """The broker refused who or where, not when.  ``530 NOT_ALLOWED`` also says "vhost …
    is down" while RabbitMQ restarts a failed vhost: that one heals, and is retried."""
    return isinstance(exc, REFUSALS) and " is down" not in str(exc)


class Consumer(CeleryConsumer):  # type: ignore[misc]  # Celery ships no type hints
    def start(self) -> None:
        try:
            super().start()
        except KombuOperationalError as exc:
            # Celery's reconnect gave up: broker_connection_max_retries attempts (its
            # default 100, about 47 minutes at the 30 s cap) all failed.  Celery would log
            # "Unrecoverable error" with a traceback and exit 1; it is the broker, said
            # like the start check says it.
            log.error(
                "worker_broker_lost",
                broker=shown_broker_url(self.app.conf.broker_url),
                cause=" ".join(str(exc).split()),
                attempts=self.app.conf.broker_connection_max_retries,
                check=BROKER_HINT,
            )
            raise WorkerShutdown(os.EX_UNAVAILABLE) from exc

    def on_connection_error_before_connected(self, exc: Exception) -> None:
        if is_refusal(exc):
            log.error(
                "worker_broker_refused",
                broker=shown_broker_url(self.app.conf.broker_url),
                cause=" ".join(str(exc).split()),
                check=BROKER_HINT,
            )
            raise WorkerShutdown(os.EX_UNAVAILABLE) from exc
        super().on_connection_error_before_connected(exc)
