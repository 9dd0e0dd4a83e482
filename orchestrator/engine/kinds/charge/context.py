"""What one run of the charge holds between its steps, and the writes the steps share.

``ChargeRun`` is handed to every step (``create``, ``lookup``, ``confirm``,
``authentication``, ``finish``): the lease (the only writer, ``engine.lease``), the
provider, and the little this run has learnt that the record does not say.  Each write
below is one fenced ``Lease.write``::

    check_ours            a provider payment is compared with the record before it is adopted,
                          confirmed or settled; one that is not ours is kept on the record
                          (``rejected_intents``) and the payment parks
    record_rejected       keep the provider payments that named the record but did not match it
    note_unknown          count an unknown outcome (a create's: a lookup is owed)
    stamp_create_attempt  before a create: renew, stamp the attempt (bounds the lookup)
    store_created_payment  ``intent_created`` after our create, with the first confirm's
                          number taken (T2)
    store_found_payment    ``intent_created`` after the lookup found our provider payment
    take_confirm_number   before a confirm: renew and take confirm n, durable before sent

Hazard: a write that prepares a provider call must be committed before that call.  Two of
them are done ahead, by the write just before, when nothing can run in between (see the
package docstring's T1 and T2); the methods above know it, so a step asks for the write it
needs and never for the way it is merged:

* the claim (T1) stamps the run's first create (``LeaseRepository._claim_values``):
  ``stamp_create_attempt`` has nothing left to write once;
* storing our created provider payment (T2) also renews and takes the first confirm's number, in
  the same statement: ``take_confirm_number`` has nothing left to write once, and that
  number does not mean a confirm may have been sent (``must_query_first``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.db.repositories.leases import LeaseRepository
from orchestrator.domain.model import PaymentRecord
from orchestrator.engine.kinds.payment_match import ExpectedPayment, payment_mismatches, reject
from orchestrator.engine.lease import Lease, Parked, describe_error
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    ActionResult,
    PaymentOrder,
    PaymentProvider,
    ProviderPayment,
)

log = get_logger(__name__)

# The provider's answer to a confirm or a cancel of a provider payment that already moved on (by an
# earlier request of ours whose answer was lost, or by the customer): the next read says how.


@dataclass
class ChargeRun:
    """One run of the charge's steps for one claimed payment."""

    lease: Lease[PaymentRecord]
    provider: PaymentProvider
    # The provider payment this run last read and found to be ours: confirming it needs no new read.
    checked_payment_id: str | None = None
    # What the provider settled, not yet written (``finish.settle``): the finish writes it
    # with the final status in one transaction (T3).
    settlement: dict[str, Any] | None = None
    # Written ahead (module docstring): the claim stamped this run's first create (T1) ...
    create_stamped: bool = False
    # ... and the write that stored the provider payment took the first confirm's number (T2).
    confirm_taken: bool = False

    @classmethod
    def after_claim(cls, lease: Lease[PaymentRecord], provider: PaymentProvider) -> ChargeRun:
        """The run for the record the claim returned (which may have stamped a create)."""
        stamped = LeaseRepository.claim_stamped_create(lease.record)
        return cls(lease, provider, create_stamped=stamped)

    @property
    def record(self) -> PaymentRecord:
        return self.lease.record

    @property
    def expected(self) -> ExpectedPayment:
        return ExpectedPayment.for_record(self.record)

    @property
    def order(self) -> PaymentOrder:
        """What the merchant asked for, for the provider calls that carry it (confirm, and a
        retrieve that replays it: ``PaymentOrder``)."""
        request = self.record.request
        return PaymentOrder(
            record_id=self.record.id,
            amount=request.amount,
            currency=request.currency,
            # The method for the account it runs on (``payment_methods``' entry, else
            # ``payment_method``).
            payment_method=self.record.payment_method_for_account,
            description=request.description,
            metadata=request.metadata,
            capture_method=request.capture_method,
            customer=request.customer,
            off_session=request.off_session,
            return_url=request.return_url,
            # The attempt of the route (decision 0086): the keys of its calls carry it.
            route_attempt=self.record.failovers + 1,
        )

    # -- before a create, before a confirm --------------------------------------------------

    def stamp_create_attempt(self) -> None:
        """Renew, and stamp the attempt (database clock) that bounds the lookup's window of
        a create whose outcome is lost.  This run's first create: the claim did it (T1)."""
        if self.create_stamped:
            self.create_stamped = False
            return
        lease = self.lease
        lease.write(
            lambda uow, now: uow.leases.renew_for_create(
                lease.id, token=lease.token, now=now, lease_until=lease.until(now)
            )
        )

    def must_query_first(self, provider_payment_id: str) -> bool:
        """Whether the provider payment is read before a confirm: a confirm may have been sent (a
        confirm number was taken, other than the one T2 took for the confirm about to go),
        or this run has not read and compared the provider payment (resumed after a crash or a
        takeover)."""
        if self.confirm_taken:
            return False
        return self.record.confirm_attempts > 0 or self.checked_payment_id != provider_payment_id

    def take_confirm_number(self) -> None:
        """Renew and take the next confirm number n in one transaction, so the key
        ``payorch-{id}-confirm-{n}`` is durable before it is sent.  Taken already when this
        run just stored the provider payment (T2)."""
        if self.confirm_taken:
            self.confirm_taken = False
            return
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

    # -- a provider payment, stored
    # ------------------------------------------------------------------

    def store_created_payment(self, provider_payment: ProviderPayment) -> None:
        """``intent_created`` after our create (T2).  The confirm that follows at once (an
        provider payment this run has just read, unconfirmed) gets its renewal and its number in the
        same statement, when it is the first confirm and fits in the time budget."""
        first_confirm = self.record.confirm_attempts == 0 and self.lease.within_budget()
        self._store_payment(provider_payment, take_confirm=first_confirm)

    def store_found_payment(self, provider_payment: ProviderPayment) -> None:
        """``intent_created`` after the lookup found our provider payment: the confirm queries
        first."""
        self._store_payment(provider_payment, take_confirm=False)

    def _store_payment(self, provider_payment: ProviderPayment, *, take_confirm: bool) -> None:
        # One prebuilt UPDATE, committed on its own, the provider-call rows riding in it
        # (``Lease.write(one_statement=True)``).
        lease = self.lease
        lease.write(
            lambda uow, now: uow.leases.mark_provider_payment_created(
                lease.id,
                token=lease.token,
                provider_payment_id=provider_payment.id,
                now=now,
                confirm_until=lease.until(now) if take_confirm else None,
            ),
            one_statement=True,
        )
        self.confirm_taken = take_confirm

    # -- what the provider said, checked and kept -------------------------------------------

    def check_ours(self, provider_payment: ProviderPayment) -> None:
        """Stop (needs_attention) on a provider payment that is not what the record asked for; it is
        kept on the record for ops and never confirmed or settled."""
        problems = payment_mismatches(provider_payment, self.expected)
        if not problems:
            self.checked_payment_id = provider_payment.id
            return
        rejected = reject(provider_payment, problems)
        entry = rejected.to_json()
        kept = [r for r in self.record.rejected_intents if r.get("id") != provider_payment.id]
        self.record_rejected([*kept, entry])
        log.warning(
            "provider_payment_mismatch",
            payment_id=self.record.id,
            provider_payment_id=provider_payment.id,
            reasons=list(problems),
        )
        raise Parked(f"provider payment is not this payment's: {rejected.describe()}")

    def record_rejected(self, rejected: list[dict[str, Any]]) -> None:
        """Keep the provider payments that named this record but did not match it (never
        confirmed)."""
        self.lease.write(
            lambda uow, now: uow.leases.record_rejected(
                self.lease.id, token=self.lease.token, rejected=rejected, now=now
            )
        )

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
        # find our provider payment and carry on (``lookup`` parks when it cannot).
        if not owe_lookup:
            self.lease.park_if_out_of_attempts(why)


# -- the customer's authentication result (``action_result``) ----------------------------


def pending_action_result(record: PaymentRecord) -> ActionResult | None:
    """The result the merchant sent that the provider has not answered yet."""
    if not record.action_result_pending or record.action_result is None:
        return None
    return ActionResult(body=record.action_result, attempt=record.action_result_attempts)


def answered_action_result(record: PaymentRecord) -> ActionResult | None:
    """The last result the provider answered, which a read replays (None: none was)."""
    if record.action_result_pending or record.action_result is None:
        return None
    if record.action_result_attempts < 1:
        return None
    return ActionResult(body=record.action_result, attempt=record.action_result_attempts)
