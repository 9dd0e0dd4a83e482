"""The refund sync: record the refunds someone made at the provider, outside payorch
(the provider's dashboard), once each.

A provider event about a payment's refunds (``charge.refunded``, ``refund.*``,
``charge.refund.updated``) is a hint, never the truth: it queues one sync of that payment
(``services.refund_sync``), and the sync reads the truth::

    [accepted] list the provider payment's refunds at the provider (every page; a read moves
    nothing,
        │      so a failed page is simply read again later)
        │
        ├─ for each refund, oldest first, one fenced transaction under the payment's row lock:
        │     ours (metadata payorch_refund_id) or already recorded ... nothing, but a row
        │                                                            waiting on it is woken
        │     unknown, succeeded ... a refund row (origin provider) completed: reserved and
        │                            booked, two ledger lines, refund.succeeded
        │     unknown, pending ..... a refund row (origin provider) waiting on the provider,
        │                            its amount reserved; the refund kind settles it later
        │     unknown, failed ...... a refund row (origin provider) failed: no money, refund.failed
        ▼
    [completed] the sync row's own status: succeeded

Hazards, and what guards them:

* Duplicate and out-of-order events, two syncs at once, a worker killed after a write:
  every write checks "already recorded?" under the payment's row lock, and a unique index
  (one refund row per provider refund id) is the second line.  A replay changes nothing.
* A payorch refund in flight is never mistaken for a foreign one: the provider refund of a
  payorch refund carries our id in its metadata from its very create, before payorch knows
  its provider id.
* The refund limit (refunds not failed never exceed the captured amount) holds: a provider
  refund is reserved with the same conditional UPDATE as a payorch refund's accept.  The
  provider allowed it, so it fits what the provider has; when it does not fit what payorch
  has reserved, payorch refunds that have not reached the provider hold the room and will be
  refused there (the provider enforces its limit too).  The sync then backs off and tries
  again, and parks for an operator if the room never frees.
* A refund that the provider reports for a payment payorch has not seen succeed is not
  booked against it: the sync backs off while the charge is unfinished (processing,
  needs_attention; parked after MAX_ATTEMPTS), and records nothing for a payment that is
  failed, canceled or requires_capture here.  That last rule relies on the pinned API
  version (after 2025-03-31.basil): older versions represented the release of an
  authorisation (a cancel, a partial capture's remainder) as Refund objects, which are not
  refunds of captured money.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import (
    ORIGIN_PROVIDER,
    OperationKindName,
    OperationRecord,
    OperationStatus,
    new_operation_id,
)
from orchestrator.domain.states import PaymentStatus, RecoveryPoint
from orchestrator.engine.kinds.operation_row import OperationRowKind, OperationSteps
from orchestrator.engine.kinds.refund_books import book_refund_outcome, final_refund_response
from orchestrator.engine.kinds.refund_reads import judge_refund, refund_pages
from orchestrator.engine.lease import Deferred, Lease, Parked
from orchestrator.logging import get_logger
from orchestrator.providers.base import PaymentProvider, ProviderRefund
from orchestrator.providers.keys import REFUND_ID_METADATA_KEY

log = get_logger(__name__)

_PROCESSING = OperationStatus.PROCESSING
# Payments with no captured money: whatever the provider lists is not a refund of theirs.
_NOTHING_TO_REFUND = frozenset(
    {PaymentStatus.FAILED, PaymentStatus.CANCELED, PaymentStatus.REQUIRES_CAPTURE}
)


class RefundSyncKind(OperationRowKind):
    """The refund sync's steps, for ``engine.runner.run_operation``."""

    name = "refund_sync"

    def run(self, lease: Lease[OperationRecord], provider: PaymentProvider) -> None:
        _RefundSync(lease, provider).run()


REFUND_SYNC = RefundSyncKind()


class _RefundSync(OperationSteps):
    def run(self) -> None:
        if self.record.recovery_point is not RecoveryPoint.ACCEPTED:
            return  # finished by someone else; the fence would refuse us anyway
        payment = self._payment()
        if payment.status in _NOTHING_TO_REFUND:
            # No captured money here, so nothing at the provider is a refund of it.
            log.info(
                "refund_sync_nothing_captured",
                operation_id=self.record.id,
                payment_id=payment.id,
                status=payment.status.value,
            )
            self.finish([], 0)
            return
        assert payment.provider_payment_id is not None
        provider_payment_id = payment.provider_payment_id
        listed = self.list_all(provider_payment_id)
        recorded: list[str] = []
        # Oldest first: rows are created in the order the provider made the refunds.
        for refund in sorted(listed, key=lambda r: (r.created or 0, r.id)):
            if refund.provider_payment_id != provider_payment_id:
                continue
            if self.apply(refund):
                recorded.append(refund.id)
        self.finish(recorded, len(listed))

    def _payment(self) -> PaymentRecord:
        with self.lease.uow() as uow:
            payment = uow.payments.get(self.record.payment_id)
        assert payment is not None
        if payment.provider_payment_id is None and payment.status not in _NOTHING_TO_REFUND:
            raise Parked("the payment has no provider payment to list refunds of")
        return payment

    def list_all(self, provider_payment_id: str) -> list[ProviderRefund]:
        """Every refund of the provider payment.  A failed page is read again (a list moves
        nothing); the backoff hands the work back to the row when it grows long."""
        refunds: list[ProviderRefund] = []
        for page in refund_pages(
            self.lease, self.provider, provider_payment_id, label="list refunds"
        ):
            if page is not None:  # a failed page is simply asked for again
                refunds.extend(page.refunds)
        return refunds

    # -- one provider refund, one fenced transaction ------------------------------------

    def apply(self, refund: ProviderRefund) -> bool:
        """Record ``refund`` if payorch does not know it; True when this call recorded it."""
        recorded: list[OperationRecord] = []

        def write(uow: UnitOfWork, now: datetime) -> OperationRecord | None:
            lease = self.lease
            # The payment's row before this operation's own: the order every finish and
            # every provider event takes (ProviderEventRepository.make_deferred_payment_due).
            payment = uow.money.lock_payment(self.record.client_id, self.record.payment_id)
            assert payment is not None
            held = uow.operations.renew(
                lease.id, token=lease.token, now=now, lease_until=lease.until(now)
            )
            if held is None:
                return None  # fenced: nothing of ours is written
            skip, known = self._known(uow, refund)
            if skip:
                if (
                    known is not None
                    and known.status is _PROCESSING
                    and uow.operations.make_waiting_due(known.id, now=now)
                ):
                    # A refund waiting on this provider refund reads it now, not at its
                    # re-check: the event was about it.
                    log.info("refund_woken", operation_id=known.id, provider_refund_id=refund.id)
                return held
            row = self._record(uow, payment, refund, now)
            recorded.append(row)
            return held

        self.lease.write(write)
        if recorded:
            row = recorded[0]
            metrics.OPERATIONS_ACCEPTED.labels(kind="refund").inc()
            log.warning(
                "provider_refund_recorded",
                operation_id=row.id,
                recorded_by=self.record.id,
                payment_id=row.payment_id,
                provider_refund_id=refund.id,
                amount=refund.amount,
                status=row.status.value,
            )
        return bool(recorded)

    def _known(
        self, uow: UnitOfWork, refund: ProviderRefund
    ) -> tuple[bool, OperationRecord | None]:
        """(skip it, the refund row it is) for ``refund``: recorded already, or created by
        payorch (our id in its metadata, stamped at its create: known before payorch learns
        its provider id, so a payorch refund in flight is never taken for a foreign one)."""
        known = uow.operations.find_refund_by_provider_id(refund.id)
        if known is not None:
            return True, known
        ours = refund.metadata.get(REFUND_ID_METADATA_KEY)
        if ours is None:
            return False, None
        named = uow.operations.get(ours)
        if named is None or named.payment_id != self.record.payment_id:
            # Our metadata key, but no refund of this payment by that id: it says it is
            # payorch's, so it is not recorded as someone else's either; an operator looks.
            log.warning(
                "provider_refund_names_unknown_refund",
                payment_id=self.record.payment_id,
                provider_refund_id=refund.id,
                names=ours,
            )
            return True, None
        return True, named

    def _record(
        self, uow: UnitOfWork, payment: PaymentRecord, refund: ProviderRefund, now: datetime
    ) -> OperationRecord:
        if payment.status is not PaymentStatus.SUCCEEDED:
            # The charge is unfinished here (processing, or parked for an operator): once
            # it succeeds this fits.  Parked after MAX_ATTEMPTS claims if it never does.
            raise Deferred(
                self.lease.settings.retry_cap_seconds,
                f"provider refund {refund.id} of a payment still {payment.status.value}",
            )
        if refund.currency.lower() != payment.request.currency.lower():
            raise Parked(
                f"provider refund {refund.id} is in {refund.currency}, the payment in "
                f"{payment.request.currency}"
            )
        verdict = judge_refund(refund)
        failed = verdict.outcome is OperationStatus.FAILED
        if not failed and uow.money.reserve_refund(payment.id, refund.amount) is None:
            # Rolled back with this transaction: nothing is recorded yet.
            raise Deferred(
                self.lease.settings.retry_cap_seconds,
                f"provider refund {refund.id} of {refund.amount} does not fit what refunds "
                f"in flight hold ({payment.amount_refund_reserved} of "
                f"{payment.amount_captured}); waiting for them to settle",
            )
        values = _provider_refund_values(payment, refund, now, recheck_at=self._recheck(now))
        if failed:
            values.update(
                failure_code=verdict.failure_code, failure_message=verdict.failure_message
            )
        if verdict.outcome is not None:
            values.update(_final_values(values, verdict.outcome, now=now))
        row = uow.operations.insert(values)
        if not verdict.pending:
            book_refund_outcome(
                uow, row, connector_account_id=payment.connector_account_id, now=now, reserved=False
            )
        return row

    def _recheck(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease.settings.processing_recheck_seconds)

    # -- the finish ---------------------------------------------------------------------

    def finish(self, recorded: list[str], listed: int) -> None:
        lease = self.lease
        document = {
            "id": self.record.id,
            "object": "refund_sync",
            "payment_id": self.record.payment_id,
            "listed": listed,
            "recorded": recorded,
        }

        def write(uow: UnitOfWork, now: datetime) -> OperationRecord | None:
            settled = uow.operations.record_settlement(
                lease.id,
                token=lease.token,
                outcome=OperationStatus.SUCCEEDED,
                provider_object_id=None,
                failure_code=None,
                failure_message=None,
                now=now,
            )
            if settled is None:
                return None
            return uow.operations.finish(
                lease.id,
                token=lease.token,
                final_response=encode_representation(document).decode("utf-8"),
                now=now,
            )

        def report(finished: OperationRecord) -> None:
            metrics.OPERATIONS_FINISHED.labels(kind=REFUND_SYNC.name, status="succeeded").inc()
            log.info(
                "refund_sync_finished",
                operation_id=finished.id,
                payment_id=finished.payment_id,
                listed=listed,
                recorded=recorded,
            )

        lease.finish(write, report)


def _provider_refund_values(
    payment: PaymentRecord, refund: ProviderRefund, now: datetime, *, recheck_at: datetime
) -> dict[str, Any]:
    """A refund row for a refund made at the provider: no client key (nobody asked payorch),
    bound to the provider's id; while pending it waits, with no holder, for its re-check
    (the refund kind then retrieves it by that id and settles it)."""
    return {
        "id": new_operation_id(OperationKindName.REFUND),
        "kind": OperationKindName.REFUND.value,
        "payment_id": payment.id,
        "client_id": payment.client_id,
        "idempotency_key": None,
        "request_fingerprint": None,
        "status": OperationStatus.PROCESSING.value,
        "recovery_point": RecoveryPoint.ACCEPTED.value,
        "lease_token": 1,
        "lease_owner": None,
        "locked_until": recheck_at,
        "next_attempt_at": recheck_at,
        "attempts": 0,
        "unknown_outcomes": 0,
        "step_attempts": 0,
        "lookup_pending": False,
        "amount": refund.amount,
        "currency": payment.request.currency,
        "reason": refund.reason[:100] if refund.reason else None,
        "metadata": {},
        "origin": ORIGIN_PROVIDER,
        "provider_object_id": refund.id,
        "created_at": now,
        "updated_at": now,
    }


def _final_values(
    values: dict[str, Any], status: OperationStatus, *, now: datetime
) -> dict[str, Any]:
    """The columns of a refund row that is final at first sight, with its stored answer."""
    final: dict[str, Any] = {
        "status": status.value,
        "provider_outcome": status.value,
        "recovery_point": RecoveryPoint.COMPLETED.value,
        "locked_until": None,
        "next_attempt_at": None,
        "completed_at": now,
    }
    final["final_response"] = final_refund_response(_as_record({**values, **final}))
    return final


def _as_record(values: dict[str, Any]) -> OperationRecord:
    return OperationRecord(
        id=values["id"],
        kind=OperationKindName.REFUND,
        payment_id=values["payment_id"],
        client_id=values["client_id"],
        status=OperationStatus(values["status"]),
        recovery_point=RecoveryPoint(values["recovery_point"]),
        lease_token=values["lease_token"],
        lease_owner=None,
        locked_until=None,
        next_attempt_at=None,
        attempts=0,
        unknown_outcomes=0,
        step_attempts=0,
        lookup_pending=False,
        last_error=None,
        amount=values["amount"],
        currency=values["currency"],
        reason=values["reason"],
        metadata=dict(values["metadata"]),
        origin=values["origin"],
        provider_object_id=values["provider_object_id"],
        provider_outcome=values.get("provider_outcome"),
        failure_code=values.get("failure_code"),
        failure_message=values.get("failure_message"),
        created_at=values["created_at"],
        updated_at=values["updated_at"],
        completed_at=values.get("completed_at"),
    )
