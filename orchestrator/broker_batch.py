"""Publishing many wake-ups with one wait for the broker's confirms (the dispatcher's).

``CeleryPublisher`` sends each task through Celery's ``send_task`` and waits for its
publisher confirm: CPU spent per message (message building, AMQP header tables,
``saferepr`` of the arguments) and a confirm round trip each, which caps how fast one
dispatcher can send wake-ups on a loaded machine.  ``BatchPublisher`` writes the same
Celery protocol-2 message itself (``task_message``: the headers, properties and body
``send_task`` produces for ``send_task(name, args=[id, token])`` with this app's
configuration), publishes a batch on one channel in confirm mode without waiting, then
waits once until every message of the batch is confirmed.

The caller counts a wake-up as sent only when ``publish`` returned the confirmed prefix
covering it: a message the broker nacked, or whose confirm never came (a lost connection,
the timeout), is reported unconfirmed and published again later (a duplicate is fenced by
its lease token; a lost one ends at the sweeper, as every lost wake-up does).

Hazard: the message layout is Celery's, written out here.  An upgrade of Celery that
changes protocol 2's headers must be reflected in ``task_message``;
tests/integration/test_broker_batch.py compares it, field by field, with what
``send_task`` publishes on the same broker, and the worker tests consume it.

Not thread-safe: one publisher per thread (the dispatcher has one).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.utils.nodenames import anon_nodename
from kombu.connection import Connection

from orchestrator.engine.publisher import BatchPublishFailed as BatchFailed

# What a batch's confirms may take before the batch counts as failed (and is retried).
CONFIRM_TIMEOUT_SECONDS = 5.0
# (task name, record id, lease token)
Wakeup = tuple[str, str, int]


def task_message(
    name: str, args: list[Any], *, task_id: str, origin: str, reply_to: str
) -> tuple[bytes, dict[str, Any]]:
    """Celery protocol 2 for ``send_task(name, args=args)`` under ``create_celery_app``'s
    settings (JSON, no kwargs, no eta/expires/time limits, results ignored): the body and
    the AMQP properties (the task headers in ``application_headers``)."""
    headers: dict[str, Any] = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args),  # saferepr's result for a short list of str and int
        "kwargsrepr": "{}",
        "origin": origin,
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    body = json.dumps(
        [args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    ).encode("utf-8")
    properties = {
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "application_headers": headers,
        "delivery_mode": 2,
        "priority": 0,
        "correlation_id": task_id,
        "reply_to": reply_to,
    }
    return body, properties


class BatchPublisher:
    def __init__(self, app: Celery, *, confirm_timeout: float = CONFIRM_TIMEOUT_SECONDS) -> None:
        self._app = app
        # Where send_task routes these tasks: the app's default queue, read from the app
        # rather than imported from ``orchestrator.broker``, which imports this module.
        self._queue: str = app.conf.task_default_queue
        self._confirm_timeout = confirm_timeout
        self._connection: Connection | None = None
        self._channel: Any = None
        self._published = 0  # the channel's last delivery tag
        self._acked_upto = 0  # every tag up to this one is confirmed ("multiple" acks)
        self._acked: set[int] = set()
        self._nacked = False
        self._origin = anon_nodename()

    def publish(self, wakeups: Sequence[Wakeup], *, task_ids: Sequence[str] = ()) -> None:
        """Publish every wake-up and wait for all their confirms; raises BatchFailed with
        the confirmed prefix.  ``task_ids``: fixed ids (tests compare with ``send_task``)."""
        if not wakeups:
            return
        try:
            channel = self._ensure_channel()
        except Exception as error:
            self.close()
            raise BatchFailed(f"{type(error).__name__}: {error}", 0) from error
        first = self._published + 1
        try:
            reply_to = self._app.thread_oid
            for index, (name, record_id, token) in enumerate(wakeups):
                task_id = task_ids[index] if task_ids else str(uuid.uuid4())
                body, properties = task_message(
                    name,
                    [record_id, token],
                    task_id=task_id,
                    origin=self._origin,
                    reply_to=reply_to,
                )
                headers = properties.pop("application_headers")
                message = channel.prepare_message(
                    body,
                    properties.pop("priority"),
                    properties.pop("content_type"),
                    properties.pop("content_encoding"),
                    headers,
                    properties,
                )
                # Celery's route for a direct queue: the default exchange, the queue's name.
                channel._basic_publish(message, exchange="", routing_key=self._queue)
                self._published += 1
            self._wait_confirms(first, first + len(wakeups) - 1)
        except BatchFailed:
            self.close()
            raise
        except Exception as error:  # kombu and amqp raise a zoo of transport errors
            confirmed = self._confirmed_prefix(first, len(wakeups))
            self.close()
            raise BatchFailed(f"{type(error).__name__}: {error}", confirmed) from error

    def _ensure_channel(self) -> Any:
        if self._channel is not None:
            return self._channel
        conf = self._app.conf
        # No heartbeats: nothing would send them while the dispatcher waits on PostgreSQL;
        # a connection the broker dropped fails the next batch, which reconnects.
        connection = Connection(  # type: ignore[no-untyped-call]
            conf.broker_url, connect_timeout=conf.broker_connection_timeout, heartbeat=0
        )
        connection.ensure_connection(max_retries=1)  # type: ignore[no-untyped-call]
        channel = connection.channel()  # type: ignore[no-untyped-call]
        # The queue (and its exchange and binding) exactly as the worker declares it; a
        # message sent to the default exchange before the queue exists would be dropped.
        self._app.amqp.queues[self._queue](channel).declare()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        self._connection, self._channel = connection, channel
        self._published, self._acked_upto, self._acked, self._nacked = 0, 0, set(), False
        return channel

    def _on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self._acked_upto = max(self._acked_upto, tag)
        else:
            self._acked.add(tag)
        while self._acked_upto + 1 in self._acked:
            self._acked_upto += 1
            self._acked.discard(self._acked_upto)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        self._nacked = True

    def _confirmed_prefix(self, first: int, count: int) -> int:
        return max(0, min(count, self._acked_upto - first + 1))

    def _wait_confirms(self, first: int, last: int) -> None:
        assert self._connection is not None
        deadline = time.monotonic() + self._confirm_timeout
        while self._acked_upto < last:
            count = last - first + 1
            if self._nacked:
                raise BatchFailed(
                    "the broker refused a message", self._confirmed_prefix(first, count)
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BatchFailed("no confirm in time", self._confirmed_prefix(first, count))
            try:
                self._connection.drain_events(timeout=remaining)  # type: ignore[no-untyped-call]
            except TimeoutError:
                continue

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            # Already broken: nothing left to release.
            with contextlib.suppress(Exception):
                connection.release()  # type: ignore[no-untyped-call]
