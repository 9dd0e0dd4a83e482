"""The charge: create and confirm one PaymentIntent, once.

Its lease lives on the payment row (``db.repositories.leases``).  The steps, by the
record's recovery point::

    [accepted] create intent ──► [intent_created] query-first / confirm
                                                      │
                          settle ◄────────────────────┘
                            │
                    [provider_settled] finish (status, outcome, ledger, outbox, COMPLETED)

* The lease is renewed before every provider call, and the confirm number is taken in
  that same transaction, so the key ``payorch-{id}-confirm-{n}`` is durable before sent.
* The happy path is three transactions, one before each provider call and one after the
  last; none can be merged with another, because each write before a call must be
  committed before that call (see ``_Charge`` for where each one is).
* An unknown outcome (timeout, connection error, 5xx) is never answered with a blind
  resend: the next confirm happens only after a retrieve proved the intent unconfirmed.
* Every intent we read is compared with the record (``domain.intent_match``) before it is
  adopted, confirmed or settled: an intent that names our record but asks for another
  amount, currency, customer, capture or payment method is never confirmed; it is kept on
  the record (``rejected_intents``) and the payment goes to needs_attention.
* A create whose outcome is unknown owes a lookup (``services.intent_lookup``): bounded by
  the create attempts stamped on the record, paged under a budget, resumed from a stored
  cursor; a failed page is an unknown outcome, never "absent".
* The final status is written in one place: ``_Charge.finish``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from orchestrator import metrics
from orchestrator.db.repositories.leases import LeaseRepository
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.intent_match import ExpectedIntent, intent_mismatches, reject
from orchestrator.domain.intent_outcome import (
    AUTHENTICATION_REQUIRED,
    AUTHENTICATION_TIMEOUT,
    Next,
    Reading,
    UnexpectedIntentStatus,
    read_intent,
)
from orchestrator.domain.ledger import lines_for
from orchestrator.domain.model import Failure, PaymentRecord
from orchestrator.domain.representation import payment_representation
from orchestrator.domain.states import Outcome, PaymentStatus, RecoveryPoint, WaitingFor
from orchestrator.engine.lease import (
    Deferred,
    Lease,
    Parked,
    ProcessResult,
    Waiting,
    describe_error,
)
from orchestrator.engine.runner import Runner, run_operation
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    PaymentProvider,
    Permanent,
    ProviderIntent,
    Retryable,
    optional,
)
from orchestrator.services.intent_lookup import Verdict, lookup_window, scan_for_intent

log = get_logger(__name__)

# Permanent errors that say *our* side is wrong (credentials, a key reused with other
# parameters): failing the merchant's payment for them would be wrong, so an operator
# looks instead.
_OPERATOR_ERRORS = frozenset({"idempotency_error"})
_OPERATOR_HTTP_STATUSES = frozenset({401, 403})
UNEXPECTED_STATE = "payment_intent_unexpected_state"


class ChargeKind:
    """The charge's rows and steps, for ``engine.runner.run_operation``."""

    name = "charge"

    def leases(self, uow: UnitOfWork) -> LeaseRepository:
        return uow.leases

    def log_fields(self, record_id: str) -> dict[str, Any]:
        return {"payment_id": record_id}

    def run(self, lease: Lease[PaymentRecord], provider: PaymentProvider) -> None:
        _Charge(
            lease, provider, create_stamped=LeaseRepository.claim_stamped_create(lease.record)
        ).run()


CHARGE = ChargeKind()


def process_payment(
    runner: Runner,
    payment_id: str,
    lease_token: int,
    **options: Any,
) -> ProcessResult:
    """Charge ``payment_id`` under the lease ``lease_token`` carries (see ``run_operation``
    for the options)."""
    return run_operation(runner, CHARGE, payment_id, lease_token, **options)


@dataclass
class _Charge:
    """One run of the charge's steps for one claimed payment.

    The transactions of the happy path (a create, a confirm that succeeds), and why none
    can be merged further::

        T1  the claim (``runner``): lease, fencing token, attempt, and, at ``accepted``,
            the create attempt's stamp (``LeaseRepository._claim_values``)
                must commit before the create: it is the lease we call under and the
                stamp that bounds the lookup of a create whose outcome is lost
            -- create (key payorch-{id}-create) --
        T2  the create's provider-call row, the intent id (``intent_created``), the
            lease renewed and the confirm number n taken (``mark_intent_created``)
                must commit before the confirm: n is the confirm's key, and a crash
                after the confirm must find the intent id to query first
            -- confirm (key payorch-{id}-confirm-{n}) --
        T3  the confirm's provider-call row, the settlement and the finish (status,
            outcome, ledger, outbox, COMPLETED) (``finish``)
                the only write after the last call

    On PostgreSQL that is 6 round trips: T1 is one statement in autocommit (its lease
    event row written by the same statement); T2 is one statement in autocommit too, its
    ``UPDATE`` inserting the call row in a CTE (``Lease.write(one_statement=True)``,
    ``db.repositories.carried_calls``); T3 is BEGIN, the settlement (its ``UPDATE`` takes
    the row lock and returns the payment's event number, ``latest_event_sequence``), the
    finish's ``UPDATE`` with its lease event, then the rows that need no answer (outcome,
    ledger, outbox, the call row) with the COMMIT, in one round trip
    (``UnitOfWork.defer_answers``, which every other ``Lease.write`` with call rows uses;
    tests/integration/test_provider_call_rows.py counts them).

    Before this, the renewals, the provider-call rows and the settlement were transactions
    of their own (eight).  The settlement is no longer committed before the finish on the
    happy path: a worker that dies between the confirm and T3 leaves ``intent_created``
    with ``confirm_attempts`` > 0, and its successor queries first (one retrieve more, no
    money moved).  A finish that must park writes the settlement first, as before.
    """

    lease: Lease[PaymentRecord]
    provider: PaymentProvider
    # The intent this run last read and found to be ours: confirming it needs no new read.
    checked_intent_id: str | None = None
    # The claim stamped this run's first create (T1): no renewal of its own before it.
    create_stamped: bool = False
    # The write that stored the intent also took the confirm number (T2).
    confirm_taken: bool = False
    # What the provider settled, not yet written (``record_settlement``'s arguments): the
    # finish writes it in its own transaction (T3).
    settlement: dict[str, Any] | None = None

    @property
    def record(self) -> PaymentRecord:
        return self.lease.record

    def run(self) -> None:
        while True:
            point = self.record.recovery_point
            if self.settlement is not None or point is RecoveryPoint.PROVIDER_SETTLED:
                self.finish()
                return
            if point is RecoveryPoint.ACCEPTED:
                self.create_intent()
            elif point is RecoveryPoint.INTENT_CREATED:
                self.drive_intent()
            else:
                return  # completed by someone else; the fence would refuse us anyway

    # -- step 2: create ---------------------------------------------------------------------

    def create_intent(self) -> None:
        """An unconfirmed intent moves no money, so resending the same create key is always
        safe; a create whose outcome is unknown is resolved by the lookup first."""
        if self.record.lookup_pending:
            self.resolve_lost_create()
            return
        record = self.record
        lease = self.lease
        lease.check_budget()
        if self.create_stamped:
            # The claim renewed and stamped this attempt (T1), committed.
            self.create_stamped = False
        else:
            # Renew, and stamp the attempt (database clock) that bounds the lookup's window.
            lease.write(
                lambda uow, now: uow.leases.renew_for_create(
                    record.id, token=lease.token, now=now, lease_until=lease.until(now)
                )
            )
        try:
            intent = self.provider.create_intent(
                record_id=record.id,
                amount=record.request.amount,
                currency=record.request.currency,
                payment_method=record.request.payment_method,
                description=record.request.description,
                metadata=record.request.metadata,
                **optional(
                    customer=(record.request.customer, None),
                    capture_method=(record.request.capture_method, "automatic"),
                ),
            )
        except Retryable as error:
            lease.wait(error.retry_after, describe_error(error))
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
        # T2: with the intent stored, renew and take the confirm number that drive_intent
        # would take next (it confirms at once an intent this run has read, unconfirmed).
        self.mark_intent_created(
            intent, take_confirm=self.record.confirm_attempts == 0 and lease.within_budget()
        )

    def resolve_lost_create(self) -> None:
        """The bounded, resumable lookup (``services.intent_lookup``), then what it proved."""
        record = self.record
        settings = self.lease.settings
        assert record.first_create_at is not None and record.last_create_at is not None
        window = lookup_window(
            record.first_create_at,
            record.last_create_at,
            margin_seconds=settings.lookup_clock_margin_seconds,
            call_seconds=settings.provider_timeout_seconds,
        )
        try:
            result = scan_for_intent(
                self.provider,
                self.expected,
                window,
                cursor=record.lookup_cursor,
                pages_read=record.lookup_pages,
                rejected=list(record.rejected_intents),
                page_budget=settings.lookup_pages_per_attempt,
                save=self.save_lookup,
            )
        except Retryable as error:
            self.lease.wait(error.retry_after, f"lookup: {describe_error(error)}")
            return
        except OutcomeUnknown as error:
            # A failed page proves nothing: the lookup stays owed and resumes at its cursor.
            self.note_unknown(error)
            self.lease.wait(None, f"lookup: {describe_error(error)}")
            return
        except Permanent as error:
            raise Parked(f"cannot list provider intents: {describe_error(error)}") from error
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

    def save_lookup(self, cursor: str | None, pages: int, rejected: list[dict[str, Any]]) -> None:
        """Before every page of the lookup: renew, store where it resumes, then check the
        time budget (a deferral here loses nothing: the cursor is already stored)."""
        lease = self.lease
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

    def _resend_after_lookup(self, verdict: Verdict, rejected: list[dict[str, Any]]) -> None:
        """The whole window was read and no intent of ours is in it.  Our create may still
        be executing at the provider (the client gave up, the server did not), so neither
        "absent" nor "only foreign intents" proves it never will land.  Re-sending the same
        create key is what is always safe: it replays our intent, waits on the in-flight one
        (409) or creates ours, and it can never adopt a foreign intent (``check_ours``).
        Out of attempts, the payment parks and names every rejected intent."""
        self.lease.write(
            lambda uow, now: uow.leases.end_lookup(self.lease.id, token=self.lease.token, now=now)
        )
        if verdict is Verdict.FOREIGN_ONLY:
            described = "; ".join(f"{r['id']} ({', '.join(r['reasons'])})" for r in rejected)
            why = f"only intents that are not this payment's (never confirmed): {described}"
            log.warning("provider_foreign_intents_only", payment_id=self.record.id, found=why)
        else:
            why = "no intent naming this payment"
        self.lease.park_if_out_of_attempts(
            f"creates with an unknown outcome; the lookup found {why}"
        )
        self.lease.wait(None, f"lookup found {why}; re-sending the create (same key)")

    # -- step 3: query first, confirm -------------------------------------------------------

    def drive_intent(self) -> None:
        """Query first (when a confirm may have been sent), then confirm."""
        intent_id = self.record.provider_payment_id
        assert intent_id is not None, "intent_created without a provider id"
        lease = self.lease
        # Query first when a confirm may have been sent, and before confirming an intent this
        # run has not read and compared with the record (resumed after a crash or takeover).
        if self.confirm_taken:
            # T2 renewed and took this confirm's number with the intent it just read.
            self.confirm_taken = False
        else:
            query_first = self.record.confirm_attempts > 0 or self.checked_intent_id != intent_id
            if query_first and self.query_first(intent_id) is not Next.CONFIRM:
                return
            self.take_confirm()
        attempt = self.record.confirm_attempts
        try:
            intent = self.provider.confirm_intent(
                intent_id,
                record_id=self.record.id,
                attempt=attempt,
                **optional(
                    off_session=(self.record.request.off_session, None),
                    return_url=(self.record.request.return_url, None),
                ),
            )
        except Declined as error:
            self._settle_failure(error, intent_id=intent_id)
            return
        except Retryable as error:
            # 429: nothing happened.  409 key in use: our earlier request with this key is
            # still executing at the provider; either way the next round queries first.
            lease.wait(error.retry_after, describe_error(error))
            return
        except OutcomeUnknown as error:
            # The provider may have charged.  The next round retrieves before any confirm;
            # a saved 500 would replay forever under this key, so a later confirm takes n+1.
            self.note_unknown(error)
            lease.wait(None, describe_error(error))
            return
        except Permanent as error:
            if error.code == UNEXPECTED_STATE:
                # Already confirmed (by us, earlier): the next round's retrieve tells how.
                log.info("confirm_unexpected_state", payment_id=self.record.id)
                return
            self._settle_permanent(error, intent_id=intent_id)
            return
        self._act_on(intent)

    def query_first(self, intent_id: str) -> Next | None:
        """Retrieve the intent and act on what it says (None: the read failed, waited)."""
        lease = self.lease
        lease.renew()
        try:
            intent = self.provider.retrieve_intent(intent_id)
        except Retryable as error:
            lease.wait(error.retry_after, describe_error(error))
            return None
        except OutcomeUnknown as error:
            self.note_unknown(error)
            lease.wait(None, describe_error(error))
            return None
        except Permanent as error:
            raise Parked(f"cannot read intent {intent_id}: {describe_error(error)}") from error
        return self._act_on(intent)

    def take_confirm(self) -> None:
        """Renew and take the next confirm number in one transaction: the key is durable
        before it is sent."""
        lease = self.lease
        lease.check_budget()
        lease.write(
            lambda uow, now: uow.leases.renew(
                lease.id,
                token=lease.token,
                now=now,
                lease_until=lease.until(now),
                next_confirm=True,
            )
        )

    def _act_on(self, intent: ProviderIntent) -> Next:
        """The provider's truth about our intent, read (``domain.intent_outcome``)."""
        self.check_ours(intent)
        try:
            reading = read_intent(intent)
        except UnexpectedIntentStatus as error:
            raise Parked(str(error)) from error
        if reading.next is Next.SETTLE:
            if reading.outcome is Outcome.CANCELED and self.action_expired():
                # Canceled by our own timeout (the cancel's answer was lost, then read).
                reading = replace(reading, failure=AUTHENTICATION_TIMEOUT)
            self.settle(reading, intent.id, intent)
        elif reading.next is Next.WAIT:
            # An asynchronous method: nothing to do until the provider settles it.  No lease
            # held meanwhile, not parked; an event or the slow re-check resumes.
            raise Waiting(
                self.lease.settings.processing_recheck_seconds,
                f"provider still processing {intent.id}",
                WaitingFor.PROVIDER,
            )
        elif reading.next is Next.AWAIT_CUSTOMER:
            self.await_customer(intent)
        return reading.next

    # -- 3-D Secure: waiting for the customer ------------------------------------------------

    def action_deadline(self, now: datetime) -> datetime:
        """When the customer's time to authenticate runs out (from the first ask)."""
        record = self.record
        started = record.waiting_since if record.waiting_for is WaitingFor.CUSTOMER else None
        return (started or now) + timedelta(seconds=self.lease.settings.action_timeout_seconds)

    def action_expired(self) -> bool:
        if self.record.waiting_for is not WaitingFor.CUSTOMER:
            return False
        now = self.lease.now()
        return now >= self.action_deadline(now)

    def await_customer(self, intent: ProviderIntent) -> None:
        """``requires_action``: show what the customer must do (``payment.requires_action``
        once), then wait without a lease until an event or the re-check; past
        ACTION_TIMEOUT_SECONDS, cancel the intent instead."""
        if self.record.request.off_session:
            # Nobody is present to authenticate (the provider should have declined).
            self.settle(
                Reading(Next.SETTLE, Outcome.FAILED, failure=AUTHENTICATION_REQUIRED), intent.id
            )
            return
        now = self.lease.now()
        deadline = self.action_deadline(now)
        if now >= deadline:
            self.cancel_abandoned(intent)
            return
        first_ask = self.record.waiting_for is not WaitingFor.CUSTOMER
        if (
            first_ask
            or self.record.next_action != intent.next_action
            or self.record.client_secret != intent.client_secret
        ):
            self.show_action(intent, emit=first_ask)
        recheck = min(self.lease.settings.action_recheck_seconds, (deadline - now).total_seconds())
        raise Waiting(
            max(recheck, 0.0), f"customer authenticating {intent.id}", WaitingFor.CUSTOMER
        )

    def show_action(self, intent: ProviderIntent, *, emit: bool) -> None:
        lease = self.lease

        def write(uow: UnitOfWork, now: datetime) -> PaymentRecord | None:
            shown = uow.leases.record_action_required(
                lease.id,
                token=lease.token,
                next_action=intent.next_action,
                client_secret=intent.client_secret,
                now=now,
            )
            if shown is not None and emit:
                uow.outcomes.add_outbox_event(
                    shown.id, "payment.requires_action", payment_representation(shown), now=now
                )
            return shown

        lease.write(write)
        log.info("payment_requires_action", payment_id=self.record.id, intent_id=intent.id)

    def cancel_abandoned(self, intent: ProviderIntent) -> None:
        """The customer never authenticated: cancel the intent (key
        ``payorch-{id}-cancel-{n}``, n one past the unknown outcomes so far, so a cancel whose
        outcome was lost is re-sent under a new key only after a retrieve found the intent
        still open), then settle ``canceled`` / ``authentication_timeout``."""
        lease = self.lease
        lease.renew()
        attempt = self.record.unknown_outcomes + 1
        try:
            canceled = self.provider.cancel_intent(
                intent.id, operation_id=self.record.id, attempt=attempt, reason="abandoned"
            )
        except Retryable as error:
            lease.wait(error.retry_after, f"cancel: {describe_error(error)}")
            return
        except OutcomeUnknown as error:
            # The next round retrieves first (confirm_attempts > 0) and sees the truth.
            self.note_unknown(error)
            lease.wait(None, f"cancel: {describe_error(error)}")
            return
        except Permanent as error:
            if error.code == UNEXPECTED_STATE:
                # It moved on meanwhile (the customer authenticated at the last moment): the
                # next round's retrieve tells how.
                log.info("cancel_unexpected_state", payment_id=self.record.id)
                return
            raise Parked(f"cannot cancel intent {intent.id}: {describe_error(error)}") from error
        self.check_ours(canceled)
        if canceled.status != "canceled":
            return  # the next round reads it again and acts on what it is
        self.settle(
            Reading(Next.SETTLE, Outcome.CANCELED, failure=AUTHENTICATION_TIMEOUT),
            canceled.id,
            canceled,
        )
        log.info("payment_authentication_timeout", payment_id=self.record.id, intent_id=intent.id)

    # -- what the provider said, stored ------------------------------------------------------

    @property
    def expected(self) -> ExpectedIntent:
        return ExpectedIntent.for_record(self.record)

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

    def record_rejected(self, rejected: list[dict[str, Any]]) -> None:
        """Keep the intents that named this record but did not match it (never confirmed)."""
        self.lease.write(
            lambda uow, now: uow.leases.record_rejected(
                self.lease.id, token=self.lease.token, rejected=rejected, now=now
            )
        )

    def mark_intent_created(self, intent: ProviderIntent, *, take_confirm: bool = False) -> None:
        lease = self.lease
        lease.write(
            lambda uow, now: uow.leases.mark_intent_created(
                lease.id,
                token=lease.token,
                provider_payment_id=intent.id,
                now=now,
                confirm_until=lease.until(now) if take_confirm else None,
            ),
            one_statement=True,
        )
        self.confirm_taken = take_confirm

    def note_unknown(self, error: Exception, *, owe_lookup: bool = False) -> None:
        """Count an unknown outcome; out of attempts -> needs_attention.  ``owe_lookup``: a
        create whose outcome is unknown, so a fresh lookup is owed before anything else."""
        why = describe_error(error)
        self.lease.write(
            lambda uow, now: uow.leases.record_unknown_outcome(
                self.lease.id, token=self.lease.token, error=why, now=now, owe_lookup=owe_lookup
            )
        )
        # A lost create is looked up before it may park the payment: the lookup can still
        # find our intent and carry on (resolve_lost_create parks when it cannot).
        if not owe_lookup:
            self.lease.park_if_out_of_attempts(why)

    def settle(
        self, reading: Reading, intent_id: str | None, intent: ProviderIntent | None = None
    ) -> None:
        """What the provider settled (``provider_settled``), for the finish to write with
        the final status in one transaction (T3).  Nothing runs between this and the finish
        (``run``); a worker that dies before that commit left ``confirm_attempts`` > 0
        (or, at ``accepted``, a create to re-send under its key), so its successor reads
        the provider's truth again before anything else: no money moves twice."""
        assert reading.outcome is not None
        outcome = reading.outcome
        settled_amount: int | None = None
        settled_currency: str | None = None
        if intent is not None and outcome is Outcome.SUCCEEDED:
            # What the provider says it moved, not what we asked for: the ledger books this.
            settled_amount = (
                intent.amount_received if intent.amount_received is not None else intent.amount
            )
            settled_currency = intent.currency.lower()
        elif intent is not None and outcome is Outcome.REQUIRES_CAPTURE:
            # Manual capture: what the provider authorised (and a capture may take).
            settled_amount = intent.amount_capturable
            settled_currency = intent.currency.lower()
        self.settlement = {
            "outcome": outcome,
            "provider_payment_id": intent_id,
            "provider_charge_id": reading.charge_id,
            "failure": reading.failure,
            "settled_amount": settled_amount,
            "settled_currency": settled_currency,
        }

    def _settle_failure(self, error: Declined, *, intent_id: str | None) -> None:
        failure = Failure(code=error.code, decline_code=error.decline_code, message=error.message)
        self.settle(Reading(Next.SETTLE, Outcome.FAILED, failure=failure), intent_id)

    def _settle_permanent(self, error: Permanent, *, intent_id: str | None) -> None:
        if error.code in _OPERATOR_ERRORS or error.http_status in _OPERATOR_HTTP_STATUSES:
            raise Parked(f"provider refused our request: {describe_error(error)}")
        failure = Failure(code=error.code or "invalid_request", message=error.message)
        self.settle(Reading(Next.SETTLE, Outcome.FAILED, failure=failure), intent_id)

    # -- step 4: the finish -----------------------------------------------------------------

    def finish(self) -> None:
        """The payment's final status is written here, and only here: one fenced
        transaction with the settlement (when this run read it), the outcome row, the
        ledger lines and the outbox event.  A finish that must park commits the
        settlement alone first, so the parked record keeps what the provider said."""
        settlement, self.settlement = self.settlement, None
        if settlement is None:
            problem = _finish_problem(self.record)
            if problem is not None:
                raise Parked(problem)
        parked: list[str] = []

        def write(uow: UnitOfWork, now: datetime) -> PaymentRecord | None:
            record = self.record
            if settlement is not None:
                settled = uow.leases.record_settlement(
                    record.id, token=self.lease.token, now=now, **settlement
                )
                if settled is None:
                    return None
                record = settled
                problem = _finish_problem(record)
                if problem is not None:
                    parked.append(problem)
                    return record  # the settlement commits; the park follows
            return self._write_finish(uow, now, record, row_locked=settlement is not None)

        self.lease.finish(write, report=_report_finished)
        if parked:
            raise Parked(parked[0])

    def _write_finish(
        self, uow: UnitOfWork, now: datetime, record: PaymentRecord, *, row_locked: bool
    ) -> PaymentRecord | None:
        outcome = record.provider_outcome
        assert outcome is not None
        status = PaymentStatus(outcome.value)
        amount, currency = _finish_amount(record)
        captured = amount if outcome is Outcome.SUCCEEDED else 0
        capturable = amount if outcome is Outcome.REQUIRES_CAPTURE else 0

        # The stored answer reflects the event this finish writes (same lock, same number):
        # a GET of the unchanged payment is these very bytes.
        # ``row_locked``: the settlement's UPDATE in this transaction holds the row lock,
        # and its row (``record``) carries the newest event number committed before the
        # lock was granted; the finish's UPDATE raises it.  Without that UPDATE, the number
        # is taken (and the lock with it) by a statement of its own.
        if row_locked:
            sequence = record.latest_event_sequence + 1
        else:
            sequence = uow.outcomes.next_event_sequence(record.id)
        final = replace(
            record,
            latest_event_sequence=sequence,
            status=status,
            recovery_point=RecoveryPoint.COMPLETED,
            lease_owner=None,
            locked_until=None,
            next_attempt_at=None,
            completed_at=None if outcome is Outcome.REQUIRES_CAPTURE else now,
            updated_at=now,
            amount_captured=captured,
            amount_capturable=capturable,
        )
        response = payment_representation(final)
        finished = uow.leases.finish(
            record.id,
            token=self.lease.token,
            status=status,
            response_body=response,
            now=now,
            amount_captured=captured,
            amount_capturable=capturable,
            event_sequence=sequence,
        )
        if finished is None:
            return None
        # The rest only writes (and the provider-call rows after it, ``Lease.write``): their
        # answers come back together with the COMMIT's, in one round trip.
        uow.defer_answers()
        uow.outcomes.add_outcome(finished, now=now)
        uow.outcomes.add_ledger_lines(
            record.id,
            lines_for(
                outcome,
                amount=amount,
                currency=currency,
                provider=record.provider,
                client_id=record.client_id,
            ),
            now=now,
        )
        uow.outcomes.add_outbox_event(
            record.id, f"payment.{status.value}", response, now=now, sequence=sequence
        )
        return finished


def _finish_amount(record: PaymentRecord) -> tuple[int, str]:
    """What the finish books: what the provider moved, if it says."""
    amount, currency = record.request.amount, record.request.currency
    moved = record.provider_outcome in (Outcome.SUCCEEDED, Outcome.REQUIRES_CAPTURE)
    if moved and record.settled_amount is not None:
        amount, currency = record.settled_amount, record.settled_currency or currency
    return amount, currency


def _report_finished(finished: PaymentRecord) -> None:
    metrics.PAYMENTS_FINISHED.labels(status=finished.status.value).inc()
    log.info("payment_finished", payment_id=finished.id, status=finished.status.value)


def _finish_problem(record: PaymentRecord) -> str | None:
    """Never finish a success at an amount the provider did not move: the checks before
    confirm make this unreachable, and this keeps it so."""
    amount, currency = _finish_amount(record)
    if (amount, currency) != (record.request.amount, record.request.currency):
        return (
            f"provider moved {amount} {currency}, the payment asked for "
            f"{record.request.amount} {record.request.currency}"
        )
    return None
