"""The worker's Celery app: the core's configuration (``orchestrator.broker``) with this
package's tasks registered on it."""

from __future__ import annotations

from celery import Celery

from orchestrator.broker import PAYMENTS_QUEUE, PROCESS_PAYMENT
from orchestrator.broker import create_celery_app as _configured_app
from orchestrator.settings import Settings

__all__ = ["PAYMENTS_QUEUE", "PROCESS_PAYMENT", "create_celery_app"]


def create_celery_app(settings: Settings) -> Celery:
    app = _configured_app(settings)
    from workers.tasks import register_tasks

    register_tasks(app)
    # Resolve the (disabled) result backend now, once.  Celery resolves it lazily on the
    # first task, reading every installed package's entry points (tens of ms): a threads
    # pool's first wave of tasks all found it unresolved at once and each paid for its
    # own resolution (about a second of CPU for 128 threads, seen in the bench's profile).
    _ = app.backend
    return app
