"""Which expired dispatch leases may still have their wake-up in the broker's queue.

A dispatch lease (``DISPATCH_LEASE_SECONDS``) says how long a wake-up may take to reach a
worker before the sweeper publishes another.  In a backlog every queued payment outlives
it, and re-publishing each one per lease multiplied the messages (13.7 per payment at 25
leases deep) and slowed the drain (every extra message costs a worker a stale claim).

The queue is first in, first out, and every record waiting for a worker (``lease_owner`` a
dispatch owner) had one wake-up published when its dispatch lease began.  So if the queue
holds ``Q`` ready messages, they are at most the wake-ups of the ``Q`` records whose dispatch
leases began last; a record with ``Q`` newer waiting records before it cannot have its
wake-up in the queue any more: it was lost (or never published) and is re-dispatched.  The
newer ones are left alone (``QueuedHold``) however long they wait.  An empty queue holds
nothing.  A wake-up judged not queued may still be in a worker's hands (taken, not yet
claimed): while a consumer is attached, it first gets one more dispatch lease under
``GRACE_OWNER`` with the same token (a grace: no message), and is re-dispatched only if
that one runs out too.  A broker that
cannot say (``None``) falls back to re-dispatching every expired lease at once.

Decision 0081.  Hazards, each costing latency or a fenced duplicate, never a charge:

* wake-ups not counted in ``Q``: taken by a worker and not yet claimed (prefetched), or
  committed and not yet published by the dispatcher.  ``DISPATCH_LAG_ALLOWANCE`` plus
  ``PREFETCH_PER_CONSUMER`` per consumer the broker reports are tolerated; beyond that, the
  oldest waiting ones are re-dispatched needlessly (once each, fenced by their token).
* a lost wake-up behind a non-empty queue is re-dispatched when the queue has moved past its
  place (that many newer records wait) or emptied, not one lease after its accept: it waits
  about as long as its message would have.
* the count is read before the transaction that uses it (no transaction across a network
  call); records accepted in between only make the hold larger (safe side), and records
  claimed in between only make it older (safe side).
"""

from __future__ import annotations

from orchestrator.db.repositories.lease_repository_base import QueuedHold
from orchestrator.db.uow import UnitOfWork
from orchestrator.engine.publisher import QueueState
from orchestrator.engine.takeover import ActorKind

# Wake-ups the queue's ready count misses (see the hazards above).  Too small: they are
# re-dispatched needlessly (a fenced duplicate each); too large: a lost wake-up behind a busy
# queue waits for that many newer payments (or an empty queue).
# Committed but not yet published by the dispatcher (it publishes within milliseconds).
DISPATCH_LAG_ALLOWANCE = 50
# Taken by one consumer and not yet claimed: a worker process prefetches up to its threads
# (``payorch worker``'s default threads pool has 128), which claim as database connections
# free up.  Seen: 131 wake-ups taken by one worker starting on a backlog, before it claimed.
PREFETCH_PER_CONSUMER = 128
# A record waiting for a worker: the accept's dispatch lease ("dispatch", services/accept.py
# and operation_accept.py), or a takeover's (``Actor.lease_owner``) ...
DISPATCHED_OWNERS: tuple[str, ...] = ("dispatch", *(f"dispatch:{k.value}" for k in ActorKind))
# The grace the sweeper gives one whose wake-up the queue no longer holds.  Not among the
# dispatched owners: its lease began without a publish, so it has no place in the queue's
# order (counting it would push older queued rows out of the hold).
GRACE_OWNER = "dispatch:grace"


def grace_first(queue: QueueState | None, lease_owner: str | None) -> bool:
    """Whether an expired lease gets a grace lease before it is re-dispatched: a wake-up
    judged not queued (the broker answered) may be in a worker's hands, not yet claimed.
    With no consumer attached, nobody can hold one: re-dispatched at once."""
    return queue is not None and queue.consumers > 0 and lease_owner in DISPATCHED_OWNERS


def queued_hold(uow: UnitOfWork, queue: QueueState | None) -> QueuedHold | None:
    """What the sweeper leaves alone given the broker's ``queue`` (None: unknown); None
    when every expired dispatch lease is to be re-dispatched."""
    if queue is None or queue.ready == 0:
        return None
    may_hold = queue.ready + DISPATCH_LAG_ALLOWANCE + queue.consumers * PREFETCH_PER_CONSUMER
    cutoff = uow.leases.nth_newest_waiting(may_hold + 1, DISPATCHED_OWNERS, also=[uow.operations])
    return QueuedHold(DISPATCHED_OWNERS, after=cutoff)
