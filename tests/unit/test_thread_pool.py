"""The worker's threads pool: the executor wakes the thread that went idle last, so a
trickle of tasks keeps running on the same few threads after a burst started many; it
starts threads only as work needs them, queues beyond its size, and shuts down as
Celery's pool expects (running tasks finish, waiting ones are cancelled)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from workers.thread_pool import LastIdleFirstExecutor, TaskPool


def current_thread_name() -> str:
    return threading.current_thread().name


def run_alone(executor: LastIdleFirstExecutor) -> str:
    """Submit one task once every thread is idle (a thread that finished sets its future
    just before it goes back to the idle stack), and return the thread that ran it."""
    deadline = time.monotonic() + 5
    while len(executor._idle) < len(executor._workers):
        assert time.monotonic() < deadline, "a thread never went idle"
        time.sleep(0.001)
    return executor.submit(current_thread_name).result(timeout=5)


def test_results_and_errors_reach_the_futures() -> None:
    executor = LastIdleFirstExecutor(max_workers=2)
    assert executor.submit(pow, 2, 10).result(timeout=5) == 1024
    with pytest.raises(ZeroDivisionError):
        executor.submit(lambda: 1 / 0).result(timeout=5)
    executor.shutdown()


def test_after_a_burst_a_trickle_runs_on_the_thread_idle_the_shortest() -> None:
    executor = LastIdleFirstExecutor(max_workers=8)
    release = threading.Event()
    burst = [executor.submit(release.wait, 5) for _ in range(8)]
    assert len(executor._threads) == 8
    release.set()
    for future in burst:
        future.result(timeout=5)
    # One task at a time: each goes to the thread that finished the previous one.  The
    # stdlib's executor would rotate them through all eight.
    names = {run_alone(executor) for _ in range(50)}
    assert len(names) == 1
    executor.shutdown()


def test_threads_start_only_as_work_needs_them_and_work_beyond_waits() -> None:
    executor = LastIdleFirstExecutor(max_workers=3)
    for _ in range(20):
        run_alone(executor)
    assert len(executor._threads) == 1
    release = threading.Event()
    running = [executor.submit(release.wait, 5) for _ in range(3)]
    queued = [executor.submit(current_thread_name) for _ in range(5)]
    assert len(executor._threads) == 3
    assert not any(future.done() for future in queued)
    release.set()
    assert all(future.result(timeout=5) for future in running)
    assert {future.result(timeout=5) for future in queued} <= {
        thread.name for thread in executor._threads
    }
    executor.shutdown()


def test_shutdown_finishes_running_tasks_and_cancels_waiting_ones() -> None:
    executor = LastIdleFirstExecutor(max_workers=1)
    started = threading.Event()
    release = threading.Event()

    def running_task() -> str:
        started.set()
        release.wait(5)
        return "finished"

    running = executor.submit(running_task)
    waiting = executor.submit(current_thread_name)
    assert started.wait(5)
    stopper = threading.Thread(target=executor.shutdown, kwargs={"cancel_futures": True})
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # waits for the running task
    release.set()
    stopper.join(5)
    assert not stopper.is_alive()
    assert running.result() == "finished"
    with pytest.raises(CancelledError):
        waiting.result()
    assert not any(thread.is_alive() for thread in executor._threads)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(current_thread_name)


def test_shutdown_stops_idle_threads() -> None:
    executor = LastIdleFirstExecutor(max_workers=4)
    release = threading.Event()
    for future in [executor.submit(release.wait, 5) for _ in range(4)]:
        release.set()
        future.result(timeout=5)
    executor.shutdown()
    assert not any(thread.is_alive() for thread in executor._threads)


def test_celerys_threads_pool_runs_on_it() -> None:
    pool = TaskPool(limit=4)
    assert isinstance(pool.executor, LastIdleFirstExecutor)
    pool.start()
    results: list[int] = []
    pool.apply_async(pow, (3, 4), callback=results.append).wait(5)
    assert results == [81]
    assert pool._get_info()["threads"] == 1
    pool.stop()
