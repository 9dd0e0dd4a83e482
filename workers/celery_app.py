"""The worker's Celery app: the core's configuration (``orchestrator.broker``) with this
package's tasks registered on it."""

from __future__ import annotations

from celery import Celery
from celery.backends.base import DisabledBackend

from orchestrator.broker import PAYMENTS_QUEUE, PROCESS_PAYMENT
from orchestrator.broker import create_celery_app as _configured_app
from orchestrator.settings import Settings

__all__ = ["PAYMENTS_QUEUE", "PROCESS_PAYMENT", "create_celery_app"]


def create_celery_app(settings: Settings) -> Celery:
    app = _configured_app(settings)
    from workers.tasks import register_tasks

    register_tasks(app)
    _share_disabled_backend(app)
    return app


def _share_disabled_backend(app: Celery) -> None:
    """Resolve the result backend once, for every thread.  payorch keeps no results
    (``task_ignore_result``): the backend is Celery's ``DisabledBackend``, which has no
    state.  Celery keeps a backend that does not say it is thread-safe per thread, and
    resolves it on a thread's first task by reading every installed package's entry
    points, a slow scan: each of a threads pool's 128 threads paid it once, so a worker's
    start spent that scan's CPU 128 times over."""
    backend = app.backend
    if isinstance(backend, DisabledBackend):
        backend.thread_safe = True
        app._backend = backend  # thread-safe now: Celery shares it between threads
