"""The worker protocol: process one payment under a lease.

Each step is one short transaction guarded by the lease token; the provider call sits
alone between two of them (commit the intent, call out, commit the outcome)::

    claim ──► [accepted] create intent ──► [intent_created] query-first / confirm
                                                      │
                          settle ◄────────────────────┘
                            │
                    [provider_settled] finish (outcome, ledger, outbox, COMPLETED)

* The claim bumps the fencing token; every later write says ``WHERE lease_token = mine``.
  Zero rows means another worker took over: stop at once, write nothing.
* The lease is renewed before every provider call, and the confirm number is taken in
  that same transaction, so the key ``payorch-{id}-confirm-{n}`` is durable before sent.
* An unknown outcome (timeout, connection error, 5xx) is never answered with a blind
  resend: the next confirm happens only after a retrieve proved the intent unconfirmed.
* Short waits happen here; longer ones are stored as ``next_attempt_at`` and the lease
  is released, so the sweeper re-queues the record when it is due.
* Every intent we read is compared with the record (``domain.intent_match``) before it is
  adopted, confirmed or settled: an intent that names our record but asks for another
  amount, currency, customer, capture or payment method is never confirmed; it is kept on
  the record (``rejected_intents``) and the payment goes to needs_attention.
* A create whose outcome is unknown owes a lookup (``services.intent_lookup``): bounded by
  the create attempts stamped on the record, paged under a budget, resumed from a stored
  cursor; a failed page is an unknown outcome, never "absent".
"""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orchestrator import metrics
from orchestrator.bootstrap import Container
from orchestrator.domain.backoff import backoff_delay
from orchestrator.domain.intent_match import ExpectedIntent, intent_mismatches, reject
from orchestrator.domain.intent_outcome import Next, Reading, UnexpectedIntentStatus, read_intent
from orchestrator.domain.ledger import lines_for
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.representation import payment_representation
from orchestrator.domain.states import Outcome, PaymentStatus, RecoveryPoint
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    Permanent,
    ProviderError,
    ProviderIntent,
    Retryable,
)
from orchestrator.services.intent_lookup import Verdict, lookup_window, scan_for_intent

log = get_logger(__name__)

# Permanent errors that say *our* side is wrong (credentials, a key reused with other
# parameters): failing the merchant's payment for them would be wrong, so an operator
# looks instead.
_OPERATOR_ERRORS = frozenset({"idempotency_error"})
_OPERATOR_HTTP_STATUSES = frozenset({401, 403})
UNEXPECTED_STATE = "payment_intent_unexpected_state"


class ProcessResult(StrEnum):
    NOT_CLAIMED = "not_claimed"  # someone else holds it, it is not due, or it is finished
    COMPLETED = "completed"
    DEFERRED = "deferred"  # waits in the row (next_attempt_at) for the sweeper
    PARKED = "parked"  # needs_attention
    FENCED = "fenced"  # taken over while we worked; nothing of ours was written after


class Fenced(Exception):
    """Our lease token is stale: another holder owns the record now."""


class Deferred(Exception):
    def __init__(self, delay: float, reason: str) -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


class Parked(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class _Run:
    """One execution of the protocol for one claimed record."""

    container: Container
    record: PaymentRecord
    owner: str
    started: float
    sleep: Callable[[float], None]
    rng: random.Random
    retries: int = 0
    # The intent this run last read and found to be ours: confirming it needs no new read.
    checked_intent_id: str | None = None

    @property
    def token(self) -> int:
        return self.record.lease_token

    @property
    def expected(self) -> ExpectedIntent:
        return ExpectedIntent.for_record(self.record)

    # -- transactions ---------------------------------------------------------------------

    def _lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.container.settings.lease_seconds)

    def renew(self, *, next_confirm: bool = False) -> None:
        """Before every provider call: extend the lease (and take the next confirm number)."""
        self._check_budget()
        with self.container.uow() as uow:
            now = uow.now()
            renewed = uow.leases.renew(
                self.record.id,
                token=self.token,
                now=now,
                lease_until=self._lease_until(now),
                next_confirm=next_confirm,
            )
            if renewed is None:
                raise Fenced()
            uow.commit()
        self.record = renewed

    def renew_for_create(self) -> None:
        """Before a create: renew, and stamp the attempt that bounds the lookup's window."""
        self._check_budget()
        with self.container.uow() as uow:
            now = uow.now()
            renewed = uow.leases.renew_for_create(
                self.record.id, token=self.token, now=now, lease_until=self._lease_until(now)
            )
            if renewed is None:
                raise Fenced()
            uow.commit()
        self.record = renewed

    def save_lookup(self, cursor: str | None, pages: int, rejected: list[dict[str, Any]]) -> None:
        """Before every page of the lookup: renew, store where it resumes, then check the
        time budget (a deferral here loses nothing: the cursor is already stored)."""
        with self.container.uow() as uow:
            now = uow.now()
            saved = uow.leases.save_lookup_progress(
                self.record.id,
                token=self.token,
                now=now,
                lease_until=self._lease_until(now),
                cursor=cursor,
                pages=pages,
                rejected=rejected,
            )
            if saved is None:
                raise Fenced()
            uow.commit()
        self.record = saved
        self._check_budget()

    def end_lookup(self) -> None:
        with self.container.uow() as uow:
            updated = uow.leases.end_lookup(self.record.id, token=self.token, now=uow.now())
            if updated is None:
                raise Fenced()
            uow.commit()
        self.record = updated

    def record_rejected(self, rejected: list[dict[str, Any]]) -> None:
        with self.container.uow() as uow:
            updated = uow.leases.record_rejected(
                self.record.id, token=self.token, rejected=rejected, now=uow.now()
            )
            if updated is None:
                raise Fenced()
            uow.commit()
        self.record = updated

    def check_ours(self, intent: ProviderIntent) -> None:
        """Stop (needs_attention) on an intent that is not what the record asked for; it is
        kept on the record for ops and never confirmed or settled."""
        problems = intent_mismatches(intent, self.expected)
        if not problems:
            self.checked_intent_id = intent.id
            return
        rejected = reject(intent, problems)
        entry = rejected.to_json()
        kept = [r for r in self.record.rejected_intents if r.get("id") != intent.id]
        self.record_rejected([*kept, entry])
        log.warning(
            "provider_intent_mismatch",
            payment_id=self.record.id,
            intent_id=intent.id,
            reasons=list(problems),
        )
        raise Parked(f"provider intent is not this payment's: {rejected.describe()}")

    def mark_intent_created(self, intent: ProviderIntent) -> None:
        with self.container.uow() as uow:
            updated = uow.leases.mark_intent_created(
                self.record.id, token=self.token, provider_payment_id=intent.id, now=uow.now()
            )
            if updated is None:
                raise Fenced()
            uow.commit()
        self.record = updated

    def settle(
        self, reading: Reading, intent_id: str | None, intent: ProviderIntent | None = None
    ) -> None:
        assert reading.outcome is not None
        settled_amount: int | None = None
        settled_currency: str | None = None
        if intent is not None and reading.outcome is Outcome.SUCCEEDED:
            # What the provider says it moved, not what we asked for: the ledger books this.
            settled_amount = (
                intent.amount_received if intent.amount_received is not None else intent.amount
            )
            settled_currency = intent.currency.lower()
        with self.container.uow() as uow:
            updated = uow.leases.record_settlement(
                self.record.id,
                token=self.token,
                outcome=reading.outcome,
                provider_payment_id=intent_id,
                provider_charge_id=reading.charge_id,
                failure=reading.failure,
                now=uow.now(),
                settled_amount=settled_amount,
                settled_currency=settled_currency,
            )
            if updated is None:
                raise Fenced()
            uow.commit()
        self.record = updated

    def note_unknown(self, error: ProviderError, *, owe_lookup: bool = False) -> None:
        """Count an unknown outcome; out of attempts -> needs_attention.  ``owe_lookup``: a
        create whose outcome is unknown, so a fresh lookup is owed before anything else."""
        with self.container.uow() as uow:
            updated = uow.leases.record_unknown_outcome(
                self.record.id,
                token=self.token,
                error=_describe(error),
                now=uow.now(),
                owe_lookup=owe_lookup,
            )
            if updated is None:
                raise Fenced()
            uow.commit()
        self.record = updated
        # A lost create is looked up before it may park the payment: the lookup can still
        # find our intent and carry on (resolve_lost_create parks when it cannot).
        if not owe_lookup:
            self._park_if_out_of_attempts(_describe(error))

    def _park_if_out_of_attempts(self, why: str) -> None:
        if self.record.unknown_outcomes >= self.container.settings.max_attempts:
            raise Parked(f"{self.record.unknown_outcomes} unknown outcomes: {why}")

    def finish(self) -> None:
        """One transaction: COMPLETED (fenced), outcome row, ledger lines, outbox event."""
        record = self.record
        assert record.provider_outcome is not None
        status = PaymentStatus(record.provider_outcome.value)
        amount, currency = record.request.amount, record.request.currency
        if record.provider_outcome is Outcome.SUCCEEDED and record.settled_amount is not None:
            # Never finish a success at an amount the provider did not move: the checks
            # before confirm make this unreachable, and this keeps it so.
            amount, currency = record.settled_amount, record.settled_currency or currency
            if (amount, currency) != (record.request.amount, record.request.currency):
                raise Parked(
                    f"provider moved {amount} {currency}, the payment asked for "
                    f"{record.request.amount} {record.request.currency}"
                )
        with self.container.uow() as uow:
            now = uow.now()
            final = replace(
                record,
                status=status,
                recovery_point=RecoveryPoint.COMPLETED,
                lease_owner=None,
                locked_until=None,
                next_attempt_at=None,
                completed_at=now,
                updated_at=now,
            )
            response = payment_representation(final)
            finished = uow.leases.finish(
                record.id, token=self.token, status=status, response_body=response, now=now
            )
            if finished is None:
                raise Fenced()
            uow.outcomes.add_outcome(finished, now=now)
            uow.outcomes.add_ledger_lines(
                record.id,
                lines_for(
                    record.provider_outcome,
                    amount=amount,
                    currency=currency,
                    provider=record.provider,
                    client_id=record.client_id,
                ),
                now=now,
            )
            uow.outcomes.add_outbox_event(record.id, f"payment.{status.value}", response, now=now)
            uow.commit()
        self.record = finished
        metrics.PAYMENTS_FINISHED.labels(status=status.value).inc()
        log.info("payment_finished", payment_id=record.id, status=status.value)

    # -- time -------------------------------------------------------------------------------

    def _check_budget(self) -> None:
        """Stop starting provider calls that could outlive the task's soft time limit:
        the work waits in the row instead, and the lease stays meaningful."""
        settings = self.container.settings
        elapsed = time.monotonic() - self.started
        if elapsed + settings.provider_timeout_seconds > settings.task_soft_time_limit:
            raise Deferred(0.0, "task time budget spent")

    def wait(self, retry_after: float | None, reason: str) -> None:
        settings = self.container.settings
        delay = backoff_delay(
            self.retries + self.record.unknown_outcomes,
            base=settings.retry_base_seconds,
            cap=settings.retry_cap_seconds,
            rng=self.rng,
            retry_after=retry_after,
        )
        self.retries += 1
        elapsed = time.monotonic() - self.started
        if (
            delay > settings.max_in_task_wait_seconds
            or elapsed + delay + settings.provider_timeout_seconds > settings.task_soft_time_limit
        ):
            raise Deferred(delay, reason)
        log.info(
            "provider_backoff", payment_id=self.record.id, delay=round(delay, 3), reason=reason
        )
        self.sleep(delay)

    # -- the steps --------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            point = self.record.recovery_point
            if point is RecoveryPoint.ACCEPTED:
                self.create_intent()
            elif point is RecoveryPoint.INTENT_CREATED:
                self.drive_intent()
            elif point is RecoveryPoint.PROVIDER_SETTLED:
                self.finish()
                return
            else:
                return  # completed by someone else; the fence would refuse us anyway

    def create_intent(self) -> None:
        """Step 2: an unconfirmed intent moves no money, so resending the same create key
        is always safe; a create whose outcome is unknown is resolved by the lookup first."""
        if self.record.lookup_pending:
            self.resolve_lost_create()
            return
        record = self.record
        provider = self.container.provider
        self.renew_for_create()
        try:
            intent = provider.create_intent(
                record_id=record.id,
                amount=record.request.amount,
                currency=record.request.currency,
                payment_method=record.request.payment_method,
                description=record.request.description,
                metadata=record.request.metadata,
            )
        except Retryable as error:
            self.wait(error.retry_after, _describe(error))
            return
        except OutcomeUnknown as error:
            # Even a saved 500 replaying under the fixed key gets here every time: each
            # unknown create owes a lookup before the next create.
            self.note_unknown(error, owe_lookup=True)
            self.resolve_lost_create()
            return
        except Declined as error:
            self._settle_failure(error, intent_id=error.intent_id)
            return
        except Permanent as error:
            self._settle_permanent(error, intent_id=None)
            return
        self.check_ours(intent)
        self.mark_intent_created(intent)

    def resolve_lost_create(self) -> None:
        """The bounded, resumable lookup (``services.intent_lookup``), then what it proved."""
        record = self.record
        settings = self.container.settings
        assert record.first_create_at is not None and record.last_create_at is not None
        window = lookup_window(
            record.first_create_at,
            record.last_create_at,
            margin_seconds=settings.lookup_clock_margin_seconds,
            call_seconds=settings.provider_timeout_seconds,
        )
        try:
            result = scan_for_intent(
                self.container.provider,
                self.expected,
                window,
                cursor=record.lookup_cursor,
                pages_read=record.lookup_pages,
                rejected=list(record.rejected_intents),
                page_budget=settings.lookup_pages_per_attempt,
                save=self.save_lookup,
            )
        except Retryable as error:
            self.wait(error.retry_after, f"lookup: {_describe(error)}")
            return
        except OutcomeUnknown as error:
            # A failed page proves nothing: the lookup stays owed and resumes at its cursor.
            self.note_unknown(error)
            self.wait(None, f"lookup: {_describe(error)}")
            return
        except Permanent as error:
            raise Parked(f"cannot list provider intents: {_describe(error)}") from error
        if result.rejected != list(self.record.rejected_intents):
            self.record_rejected(result.rejected)
        if result.verdict is Verdict.FOUND:
            assert result.intent is not None
            self.checked_intent_id = result.intent.id
            self.mark_intent_created(result.intent)
        elif result.verdict is Verdict.UNFINISHED:
            raise Deferred(0.0, f"lookup continues after {self.record.lookup_pages} pages")
        else:
            self._resend_after_lookup(result.verdict, result.rejected)

    def _resend_after_lookup(self, verdict: Verdict, rejected: list[dict[str, Any]]) -> None:
        """The whole window was read and no intent of ours is in it.  Our create may still
        be executing at the provider (the client gave up, the server did not), so neither
        "absent" nor "only foreign intents" proves it never will land.  Re-sending the same
        create key is what is always safe: it replays our intent, waits on the in-flight one
        (409) or creates ours, and it can never adopt a foreign intent (``check_ours``).
        Out of attempts, the payment parks and names every rejected intent."""
        self.end_lookup()
        if verdict is Verdict.FOREIGN_ONLY:
            described = "; ".join(f"{r['id']} ({', '.join(r['reasons'])})" for r in rejected)
            why = f"only intents that are not this payment's (never confirmed): {described}"
            log.warning("provider_foreign_intents_only", payment_id=self.record.id, found=why)
        else:
            why = "no intent naming this payment"
        self._park_if_out_of_attempts(f"creates with an unknown outcome; the lookup found {why}")
        self.wait(None, f"lookup found {why}; re-sending the create (same key)")

    def drive_intent(self) -> None:
        """Step 3: query first (when a confirm may have been sent), then confirm."""
        intent_id = self.record.provider_payment_id
        assert intent_id is not None, "intent_created without a provider id"
        provider = self.container.provider
        # Query first when a confirm may have been sent, and before confirming an intent this
        # run has not read and compared with the record (resumed after a crash or takeover).
        if self.record.confirm_attempts > 0 or self.checked_intent_id != intent_id:
            self.renew()
            try:
                intent = provider.retrieve_intent(intent_id)
            except Retryable as error:
                self.wait(error.retry_after, _describe(error))
                return
            except OutcomeUnknown as error:
                self.note_unknown(error)
                self.wait(None, _describe(error))
                return
            except Permanent as error:
                raise Parked(f"cannot read intent {intent_id}: {_describe(error)}") from error
            if self._act_on(intent) is not Next.CONFIRM:
                return

        self.renew(next_confirm=True)
        attempt = self.record.confirm_attempts
        try:
            intent = provider.confirm_intent(intent_id, record_id=self.record.id, attempt=attempt)
        except Declined as error:
            self._settle_failure(error, intent_id=intent_id)
            return
        except Retryable as error:
            # 429: nothing happened.  409 key in use: our earlier request with this key is
            # still executing at the provider; either way the next round queries first.
            self.wait(error.retry_after, _describe(error))
            return
        except OutcomeUnknown as error:
            # The provider may have charged.  The next round retrieves before any confirm;
            # a saved 500 would replay forever under this key, so a later confirm takes n+1.
            self.note_unknown(error)
            self.wait(None, _describe(error))
            return
        except Permanent as error:
            if error.code == UNEXPECTED_STATE:
                # Already confirmed (by us, earlier): the next round's retrieve tells how.
                log.info("confirm_unexpected_state", payment_id=self.record.id)
                return
            self._settle_permanent(error, intent_id=intent_id)
            return
        self._act_on(intent)

    def _act_on(self, intent: ProviderIntent) -> Next:
        self.check_ours(intent)
        try:
            reading = read_intent(intent)
        except UnexpectedIntentStatus as error:
            raise Parked(str(error)) from error
        if reading.next is Next.SETTLE:
            self.settle(reading, intent.id, intent)
        elif reading.next is Next.WAIT:
            self.wait(None, f"provider still processing {intent.id}")
        return reading.next

    def _settle_failure(self, error: Declined, *, intent_id: str | None) -> None:
        failure = Failure(code=error.code, decline_code=error.decline_code, message=error.message)
        self.settle(Reading(Next.SETTLE, Outcome.FAILED, failure=failure), intent_id)

    def _settle_permanent(self, error: Permanent, *, intent_id: str | None) -> None:
        if error.code in _OPERATOR_ERRORS or error.http_status in _OPERATOR_HTTP_STATUSES:
            raise Parked(f"provider refused our request: {_describe(error)}")
        failure = Failure(code=error.code or "invalid_request", message=error.message)
        self.settle(Reading(Next.SETTLE, Outcome.FAILED, failure=failure), intent_id)


def _describe(error: BaseException) -> str:
    code = getattr(error, "code", None)
    status = getattr(error, "http_status", None)
    parts = [type(error).__name__]
    if status:
        parts.append(str(status))
    if code:
        parts.append(str(code))
    return f"{' '.join(parts)}: {error}"[:2000]


def process_payment(
    container: Container,
    payment_id: str,
    lease_token: int,
    *,
    owner: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    interruptions: tuple[type[BaseException], ...] = (),
) -> ProcessResult:
    """Run the protocol for one record.  Safe to call any number of times, concurrently,
    with stale tokens: the claim and the fence decide who may act.

    ``interruptions`` are exceptions that mean "stop now and hand the work back" (Celery's
    SoftTimeLimitExceeded): the record is deferred for the sweeper instead of waiting for
    its lease to expire."""
    owner = owner or default_owner()
    started = time.monotonic()
    settings = container.settings
    with container.uow() as uow:
        now = uow.now()
        record = uow.leases.claim(
            payment_id,
            carried_token=lease_token,
            owner=owner,
            now=now,
            lease_until=now + timedelta(seconds=settings.lease_seconds),
        )
        uow.commit()
    if record is None:
        log.info("claim_skipped", payment_id=payment_id, carried_token=lease_token)
        return ProcessResult.NOT_CLAIMED
    log.info(
        "lease_claimed",
        payment_id=payment_id,
        lease_token=record.lease_token,
        attempt=record.attempts,
        recovery_point=record.recovery_point.value,
    )
    run = _Run(container, record, owner, started, sleep, rng or random.Random())
    try:
        if record.attempts > settings.max_attempts:
            raise Parked(f"claimed {record.attempts} times without finishing")
        run.run()
        return ProcessResult.COMPLETED
    except Fenced:
        metrics.FENCED_WRITES.inc()
        log.warning("fenced_out", payment_id=payment_id, lease_token=run.token)
        return ProcessResult.FENCED
    except Deferred as deferred:
        return _defer(run, deferred)
    except Parked as parked:
        return _park(run, parked.reason)
    except interruptions as interruption:
        return _defer(run, Deferred(0.0, f"interrupted: {type(interruption).__name__}"))


def _defer(run: _Run, deferred: Deferred) -> ProcessResult:
    with run.container.uow() as uow:
        now = uow.now()
        until = now + timedelta(seconds=deferred.delay)
        updated = uow.leases.defer(
            run.record.id, token=run.token, until=until, error=deferred.reason, now=now
        )
        if updated is None:
            metrics.FENCED_WRITES.inc()
            log.warning("fenced_out", payment_id=run.record.id, lease_token=run.token)
            return ProcessResult.FENCED
        uow.commit()
    log.info(
        "payment_deferred",
        payment_id=run.record.id,
        delay=round(deferred.delay, 3),
        reason=deferred.reason,
    )
    return ProcessResult.DEFERRED


def _park(run: _Run, reason: str) -> ProcessResult:
    with run.container.uow() as uow:
        updated = uow.leases.park(run.record.id, token=run.token, error=reason, now=uow.now())
        if updated is None:
            metrics.FENCED_WRITES.inc()
            log.warning("fenced_out", payment_id=run.record.id, lease_token=run.token)
            return ProcessResult.FENCED
        uow.commit()
    metrics.PAYMENTS_PARKED.inc()
    log.warning("payment_needs_attention", payment_id=run.record.id, reason=reason)
    return ProcessResult.PARKED
