"""Provider-call rows held for the run's next fenced write.

The operator's payment page shows every provider call (``providers.observed``).  Each
row used to be written in a short transaction of its own right after the call returned:
two of a charge's eight transactions.  Inside ``run_operation`` the row is held here
instead and ``Lease.write`` adds it to the next step's transaction, which follows the call
by milliseconds (the write that stores what the call answered).

Hazards, and how they are kept:

* evidence must not depend on the step: when that transaction does not commit (fenced
  out, a database error), the held rows are written again on their own
  (``write_alone``), and whatever the run still holds when it ends is written the same
  way (``run_operation``'s ``finally``);
* recording still never changes the worker's course: a failure to write them alone is
  logged and swallowed, as before;
* what is lost: rows held by a process that is killed between a call and its next write
  (milliseconds), where before the window was the row's own commit.

Per thread of execution (a ``ContextVar``): a threads worker runs one task per thread, and
a provider call answers in the thread that made it.  Outside a run (the API's ops actions,
the sweeper's reads) nothing is collecting and the sink writes at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.history import ProviderCallRecord
from orchestrator.logging import get_logger

log = get_logger(__name__)

_held: ContextVar[list[ProviderCallRecord] | None] = ContextVar("payorch_held_calls", default=None)


@contextmanager
def collecting() -> Iterator[None]:
    """Hold provider-call rows made in this context for the next fenced write."""
    reset = _held.set([])
    try:
        yield
    finally:
        _held.reset(reset)


def hold(call: ProviderCallRecord) -> bool:
    """Keep ``call`` for the next write; False when nothing is collecting."""
    held = _held.get()
    if held is None:
        return False
    held.append(call)
    return True


def take() -> list[ProviderCallRecord]:
    """The rows held so far (now the caller's to write)."""
    held = _held.get()
    if not held:
        return []
    taken = list(held)
    held.clear()
    return taken


def write_alone(calls: list[ProviderCallRecord], uow_factory: UnitOfWorkFactory) -> None:
    """Rows whose transaction did not commit, in one of their own; never raises."""
    if not calls:
        return
    try:
        with uow_factory() as uow:
            now = uow.now()
            for call in calls:
                uow.history.add_provider_call(call, now=now)
            uow.commit()
    except Exception as failure:  # evidence only: never change the worker's course
        log.warning(
            "provider_call_not_recorded",
            calls=len(calls),
            payment_id=calls[0].payment_id,
            error=type(failure).__name__,
        )
