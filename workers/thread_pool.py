"""Celery's threads pool with an executor that hands work to the thread idle the shortest.

Why: ``concurrent.futures.ThreadPoolExecutor`` keeps its idle threads waiting on one queue,
and the queue wakes them in turn, so once a burst has started all of a pool's threads (64
per process), even a trickle of tasks rotates through every one of them.  When the prefetch
limit (``workers.prefetch_limit``) keeps 9 tasks in flight, 9 threads stay warm and the
rest sleep; with the rotation every payment paid extra context switches and CPU to wake
threads that had gone cold (the benchmark, ``payorch bench`` and docs/performance.md,
measures this at zero provider latency).

Everything else is Celery's ``TaskPool`` for threads: the concurrency (threads are started
as work needs them, at most ``limit``), the futures it waits on, the shutdown that finishes
running tasks and cancels the ones not started.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from celery.concurrency import thread as celery_thread

__all__ = ["LastIdleFirstExecutor", "TaskPool"]

WorkItem = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def _run(item: WorkItem) -> None:
    future, fn, args, kwargs = item
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:  # the future carries it to whoever waits, as the stdlib's
        future.set_exception(error)
    else:
        future.set_result(result)


# What ``next_for`` answers a worker that should wait on its lock for ``hand``.
_WAIT: Any = object()


class _Worker:
    """One thread; it sleeps on a lock of its own, so it is woken only when handed work."""

    def __init__(self, pool: LastIdleFirstExecutor, first: WorkItem) -> None:
        self._pool = pool
        self._item: WorkItem | None = first
        self._wake = threading.Lock()
        self._wake.acquire()  # held until work (or None, to stop) is handed over
        self.thread = threading.Thread(target=self._loop, name=pool.thread_name(), daemon=True)

    def hand(self, item: WorkItem | None) -> None:
        self._item = item
        self._wake.release()

    def _loop(self) -> None:
        item = self._item
        while item is not None:
            self._item = None
            _run(item)
            item = self._pool.next_for(self)
            if item is _WAIT:
                self._wake.acquire()
                item = self._item


class LastIdleFirstExecutor:
    """The part of ``Executor`` Celery's thread pool uses: ``submit``, ``shutdown`` and
    ``_threads`` (for ``celery inspect stats``)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "payorch-task") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # a stack: the last to go idle is the first woken
        self._pending: deque[WorkItem] = deque()
        self._workers: list[_Worker] = []
        self._shutdown = False

    @property
    def _threads(self) -> set[threading.Thread]:
        return {worker.thread for worker in self._workers}

    def thread_name(self) -> str:
        return f"{self._prefix}_{len(self._workers)}"

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        item: WorkItem = (future, fn, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                self._idle.pop().hand(item)
            elif len(self._workers) < self._max_workers:
                worker = _Worker(self, item)
                self._workers.append(worker)
                worker.thread.start()
            else:
                self._pending.append(item)
        return future

    def next_for(self, worker: _Worker) -> WorkItem | None:
        """What a worker that finished does next: a waiting item, None to stop (shutdown),
        or ``_WAIT`` on the idle stack, where ``submit`` or ``shutdown`` will hand it one."""
        with self._lock:
            if self._pending:
                return self._pending.popleft()
            if self._shutdown:
                return None
            self._idle.append(worker)
            return _WAIT  # type: ignore[no-any-return]

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._pending:
                    self._pending.popleft()[0].cancel()
            while self._idle:
                self._idle.pop().hand(None)
            workers = list(self._workers)
        if wait:
            for worker in workers:
                if worker.thread is not threading.current_thread():
                    worker.thread.join()


class TaskPool(celery_thread.TaskPool):  # type: ignore[misc]  # celery is untyped
    """``--pool threads`` with the executor above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The parent's ThreadPoolExecutor has started no thread yet: replacing it is free.
        self.executor = LastIdleFirstExecutor(max_workers=self.limit)
