"""The worker's Celery app resolves its (disabled) result backend once for every thread:
Celery would otherwise resolve it again on each thread's first task, reading every
installed package's entry points."""

from __future__ import annotations

import threading

from celery.backends.base import DisabledBackend

from orchestrator.settings import Settings
from workers.celery_app import create_celery_app


def test_every_thread_of_a_threads_pool_shares_the_one_disabled_backend(tmp_path) -> None:
    settings = Settings(env="dev", database_url=f"sqlite:///{tmp_path / 'x.sqlite3'}")
    app = create_celery_app(settings)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(app.backend)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert isinstance(app.backend, DisabledBackend)
    assert len(seen) == 4 and all(backend is app.backend for backend in seen)
