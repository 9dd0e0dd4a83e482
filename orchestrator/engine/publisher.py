"""The seam between committed work and the broker.

Celery is a wake-up signal; the row is the truth.  A publish happens only after the
record's transaction committed, and a failed or lost publish costs latency, never money:
the record's dispatch lease expires and the sweeper re-queues it.

The protocol lives in the engine, its lowest user (the dispatcher, the sweeper and the
takeover publish; so do the services and ops above it); the Celery publisher that implements
it (``orchestrator.broker``) is known to the composition root only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from orchestrator.domain.ids import is_payment_id


class PublishFailed(Exception):
    """The broker did not confirm the message; the record is durable regardless."""


class BatchPublishFailed(PublishFailed):
    """Only the first ``confirmed`` wake-ups of the batch were confirmed by the broker."""

    def __init__(self, message: str, confirmed: int) -> None:
        super().__init__(message)
        self.confirmed = confirmed


@runtime_checkable
class BatchTaskPublisher(Protocol):
    """A publisher that confirms many wake-ups at once (the dispatcher uses it when its
    publisher has it)."""

    def publish_process_payments(self, wakeups: Sequence[tuple[str, int]]) -> None:
        """Publish every (payment id, lease token); return once all are confirmed.
        Raises BatchPublishFailed, which says how many from the start were confirmed."""

    def close_batches(self) -> None:
        """Close the calling thread's batch connection (the dispatcher, when it stops)."""


@dataclass(frozen=True)
class QueueState:
    """The wake-up queue as the broker reports it: messages ready (not those a worker took
    and has not acknowledged) and consumers (worker processes) attached."""

    ready: int
    consumers: int


@runtime_checkable
class QueueDepthProbe(Protocol):
    """A publisher that can say what waits in the broker's queue (the sweeper uses it when
    its publisher has it, to tell a queued wake-up from a lost one)."""

    def wake_up_queue(self) -> QueueState | None:
        """The wake-up queue now; None when the broker cannot say (unreachable)."""


class TaskPublisher(Protocol):
    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        """Ask a worker to process ``payment_id`` with the dispatch lease ``lease_token``.
        ``traceparent``: the payment's trace context, carried as a message header (the
        accept's, which has it at hand); without it the worker reads the row's (decision
        0102).  Raises PublishFailed."""

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        """Ask a worker to run the operation (capture, cancel, refund) ``operation_id``.
        Raises PublishFailed."""

    def broker_reachable(self) -> bool:
        """For readiness checks: can a publish reach the broker right now?"""


def publish_wake_up(publisher: TaskPublisher, record_id: str, lease_token: int) -> None:
    """The task for the id's kind: a payment's charge (``pay_…``), or an operation
    (``cap_…``, ``cnl_…``, ``rfd_…``: the kind is in the id).  Raises PublishFailed."""
    if is_payment_id(record_id):
        publisher.publish_process_payment(record_id, lease_token)
    else:
        publisher.publish_operation(record_id, lease_token)


class NullPublisher:
    """Publishes nothing: for tools that only write records (the sweeper re-queues)."""

    def publish_process_payment(
        self, payment_id: str, lease_token: int, *, traceparent: str | None = None
    ) -> None:
        raise PublishFailed("no broker configured")

    def publish_operation(self, operation_id: str, lease_token: int) -> None:
        raise PublishFailed("no broker configured")

    def broker_reachable(self) -> bool:
        return False
