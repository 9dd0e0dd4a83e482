"""A payment's task joins the payment's trace, whoever woke the worker (decision 0102).

Celery's instrumentation starts the task's span on ``task_prerun`` with the parent its
message's ``traceparent`` header names.  Most wake-ups carry none: the dispatcher and the
sweeper build theirs from an id and a lease token.  The accept stored the trace context
with the payment (``payments.traceparent``), so this receiver, connected before the
instrumentation's, puts the row's into the task's request when the message had none: the
instrumentation then reads it as if the message had carried it.

Hazard: tracing is evidence, never protocol.  A failed read (a database blip) leaves the
task in a trace of its own, logged; it never stops the task, whose claim reads the row
again anyway.  Only while traces are on (``workers.tasks`` connects it then): otherwise no
read is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.broker import PROCESS_PAYMENT
from orchestrator.logging import get_logger
from orchestrator.tracing import TRACEPARENT

log = get_logger(__name__)

# A payment's stored trace context by its id (``workers.tasks``: through the container).
ReadTraceparent = Callable[[str], "str | None"]
Receiver = Callable[..., None]


def payment_trace_joiner(read: ReadTraceparent) -> Receiver:
    """The ``task_prerun`` receiver: the row's trace context (``read``) for a
    ``process_payment`` task whose message carried none."""

    def join_payment_trace(
        sender: Any = None, task: Any = None, args: Any = None, **_signal: Any
    ) -> None:
        task = task or sender
        if task is None or task.name != PROCESS_PAYMENT or not args:
            return
        if getattr(task.request, TRACEPARENT, None):
            return
        payment_id = str(args[0])
        try:
            parent = read(payment_id)
        except Exception as error:  # evidence only: the task runs, in a trace of its own
            log.warning("trace_context_not_read", payment_id=payment_id, error=type(error).__name__)
            return
        if parent:
            setattr(task.request, TRACEPARENT, parent)

    return join_payment_trace
