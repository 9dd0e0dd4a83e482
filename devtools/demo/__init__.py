"""``payorch demo``: the whole system on one machine with no servers.

embedded.py   the stack in one process: SQLite, Celery on the in-memory transport with
              worker threads, the sweeper, the provider simulator, the API (uvicorn)
servers.py    uvicorn in a background thread (also used by the tests)
crash.py      a worker that dies right after the provider charged, once
storm.py      merchants' traffic: duplicates, concurrent retries, polling
refunds.py    the refund round (over-asking, under refund faults)
captures.py   the capture round (raced captures and cancels, under faults)
failover.py   the failover round (a route across both providers, soft declines forced)
report.py     the invariants, checked against the database and the provider
runner.py     the orchestration of one demo run
"""
