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


def test_a_threads_worker_gets_the_prefetch_step_its_floor_and_the_pool(tmp_path) -> None:
    from celery import concurrency
    from kombu.utils.imports import symbol_by_name

    from orchestrator.broker import PREFETCH_FLOOR_CONF, THREADS_POOL_ALIAS
    from orchestrator.cli.worker.command import configure_for_threads
    from workers.prefetch_limit import STEP
    from workers.thread_pool import TaskPool

    settings = Settings(
        env="dev", database_url=f"sqlite:///{tmp_path / 'app.sqlite3'}", worker_prefetch_floor=12
    )
    app = create_celery_app(settings)
    configure_for_threads(app, settings)
    assert STEP in app.steps["consumer"]
    assert app.conf[PREFETCH_FLOOR_CONF] == 12
    assert concurrency.get_implementation(THREADS_POOL_ALIAS) is TaskPool
    assert symbol_by_name(STEP).__name__ == "AdaptivePrefetch"
