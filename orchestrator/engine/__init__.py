"""The one engine: every provider-side effect runs here under a lease.

runner.py      run_operation: claim -> the kind's steps -> fenced / deferred / parked
lease.py       Lease: the fenced write, renewal, time budget and backoff
takeover.py    take_over_lease: fence out a holder (the sweeper and operators share it)
sweep.py       Sweeper.run_once: take over expired leases, re-queue due work
publisher.py   TaskPublisher: the wake-up's seam to the broker, after a commit
kinds/         one small module per operation kind: its steps and how it reads the
               provider's truth after an unknown outcome
"""
