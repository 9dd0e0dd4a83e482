"""The worker's Celery app: the core's configuration (``orchestrator.broker``) with this
package's tasks registered on it.

``payorch worker`` builds it with ``create_celery_app``.  ``app`` is the same app for a
worker started without ``payorch`` (``celery -A workers.celery_app worker``): built when
Celery first reads it, not at import, and refusing bad configuration as ``payorch`` does
(one line naming the variable, exit status 78, no traceback), so such a worker never
guesses its environment.  It gets Celery's own defaults for what ``payorch worker``
arranges (JSON logs, the threads pool's database connections, traces).
"""

from __future__ import annotations

from celery import Celery
from celery.backends.base import DisabledBackend

from orchestrator.broker import PAYMENTS_QUEUE, PROCESS_PAYMENT
from orchestrator.broker import create_celery_app as _configured_app
from orchestrator.settings import Settings
from orchestrator.settings_loading import settings_or_exit

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


def __getattr__(name: str) -> Celery:
    """``app``, built on first read and kept (PEP 562: only names not defined above)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = create_celery_app(settings_or_exit())
    globals()["app"] = built
    return built
