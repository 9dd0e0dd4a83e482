"""The Celery side of the worker runtime, what runs inside each worker process (the
command that starts and supervises the processes is ``orchestrator/cli/worker/``):

celery_app.py      the core's Celery configuration with these tasks registered on it
tasks.py           thin tasks that call the engine, and the process's container
thread_pool.py     the threads pool that wakes the thread idle the shortest
prefetch_limit.py  the prefetch count that follows the provider's latency

It imports the core; the core never imports it (Celery finds it by name).
"""
