"""Lookup: resolve a create whose outcome is unknown, before anything else is sent.

Read top to bottom, ``resolve_lost_create`` is one round while a lookup is owed
(``lookup_pending``)::

    1. window    the only times the provider can have created our payment: from the first
                 create stamped on the record to the last, with a margin
    2. scan      page through the provider payments created in that window
                 (``engine.kinds.lost_create_lookup``), at most a budget of pages per
                 round, storing the cursor before every page (``save_progress``) so an
                 interrupted scan resumes instead of starting over
    3. verdict   found       adopt our payment (``intent_created``); the confirm queries first
                 unfinished  defer; the next round resumes at the cursor
                 absent,     re-send the create under the same key (``resend_create``), or,
                 foreign     out of attempts, park and name every rejected provider payment

Hazards:

* a failed page is an unknown outcome, never "absent": the lookup stays owed;
* a provider payment that names our record but asks for something else is never adopted: it is kept
  on the record (``rejected_intents``) for ops;
* "absent" does not prove the create will never land (the provider may still be executing
  it), so the only safe answer is the same create key again, which replays or joins ours and
  can never adopt a foreign provider payment.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from orchestrator.engine.kinds.charge.context import ChargeRun
from orchestrator.engine.kinds.lost_create_lookup import Verdict, lookup_window, scan_for_payment
from orchestrator.engine.lease import Deferred, Parked, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import OutcomeUnknown, Permanent, Retryable

log = get_logger(__name__)


def resolve_lost_create(run: ChargeRun) -> None:
    """The bounded, resumable lookup (``engine.kinds.lost_create_lookup``), then what it proved."""
    record = run.record
    lease = run.lease
    settings = lease.settings
    # 1. the window
    assert record.first_create_at is not None and record.last_create_at is not None
    window = lookup_window(
        record.first_create_at,
        record.last_create_at,
        margin_seconds=settings.lookup_clock_margin_seconds,
        call_seconds=settings.provider_timeout_seconds,
    )
    # 2. the scan
    try:
        result = scan_for_payment(
            run.provider,
            run.expected,
            window,
            cursor=record.lookup_cursor,
            pages_read=record.lookup_pages,
            rejected=list(record.rejected_intents),
            page_budget=settings.lookup_pages_per_attempt,
            save=partial(save_progress, run),
        )
    except Retryable as error:
        lease.wait(error.retry_after, f"lookup: {describe_error(error)}")
        return
    except OutcomeUnknown as error:
        # A failed page proves nothing: the lookup stays owed and resumes at its cursor.
        run.note_unknown(error)
        lease.wait(None, f"lookup: {describe_error(error)}")
        return
    except Permanent as error:
        raise Parked(f"cannot list provider payments: {describe_error(error)}") from error
    # 3. the verdict
    if result.rejected != list(run.record.rejected_intents):
        run.record_rejected(result.rejected)
    if result.verdict is Verdict.FOUND:
        assert result.provider_payment is not None
        run.checked_payment_id = result.provider_payment.id
        run.store_found_payment(result.provider_payment)
    elif result.verdict is Verdict.UNFINISHED:
        raise Deferred(0.0, f"lookup continues after {run.record.lookup_pages} pages")
    else:
        resend_create(run, result.verdict, result.rejected)


def save_progress(
    run: ChargeRun, cursor: str | None, pages: int, rejected: list[dict[str, Any]]
) -> None:
    """Before every page of the lookup: renew, store where it resumes, then check the
    time budget (a deferral here loses nothing: the cursor is already stored)."""
    lease = run.lease
    lease.write(
        lambda uow, now: uow.leases.save_lookup_progress(
            lease.id,
            token=lease.token,
            now=now,
            lease_until=lease.until(now),
            cursor=cursor,
            pages=pages,
            rejected=rejected,
        )
    )
    lease.check_budget()


def resend_create(run: ChargeRun, verdict: Verdict, rejected: list[dict[str, Any]]) -> None:
    """The whole window was read and no provider payment of ours is in it.  Our create may still be
    executing at the provider (the client gave up, the server did not), so neither "absent"
    nor "only foreign provider payments" proves it never will land.  Re-sending the same create key
    is what is always safe: it replays our provider payment, waits on the in-flight one (409) or
    creates ours, and it can never adopt a foreign provider payment (``ChargeRun.check_ours``).  Out
    of attempts, the payment parks and names every rejected provider payment."""
    lease = run.lease
    lease.write(lambda uow, now: uow.leases.end_lookup(lease.id, token=lease.token, now=now))
    if verdict is Verdict.FOREIGN_ONLY:
        described = "; ".join(f"{r['id']} ({', '.join(r['reasons'])})" for r in rejected)
        why = f"only provider payments that are not this payment's (never confirmed): {described}"
        log.warning("provider_foreign_payments_only", payment_id=run.record.id, found=why)
    else:
        why = "no provider payment naming this payment"
    lease.park_if_out_of_attempts(f"creates with an unknown outcome; the lookup found {why}")
    lease.wait(None, f"lookup found {why}; re-sending the create (same key)")
