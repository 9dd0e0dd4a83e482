"""``payorch worker``, the command's side of the worker runtime (the Celery side, in each
worker process, is ``workers/``: the app, the tasks and their container, the thread pool,
the adaptive prefetch limit; the core never imports it).

command.py     the command: checks, connection sizing, the Celery worker's configuration
pool.py        which pool, its default concurrency, the connection pools sized from it
processes.py   one threads pool per usable CPU, forked and supervised by the command
"""
