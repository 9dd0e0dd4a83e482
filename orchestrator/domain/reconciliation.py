"""Reconciliation's comparison (decision 0092): what a provider says against what payorch
recorded, as pure functions over plain records.  Read top to bottom.

One provider object is compared with our row it names and gives at most one finding, of its
most specific kind:

    provider payment (has our reference)   our payment              finding
    ─────────────────────────────────────  ───────────────────────  ──────────────────────
    money held or moved                    absent, failed,          orphan_at_provider
      (succeeded, requires_capture)          canceled, needs_attention
    money held or moved                    moved money through      orphan_at_provider (a
                                             another provider payment second charge)
    any                                    processing               none: in flight, a later
                                                                    run compares it
    succeeded                              requires_capture         status_mismatch
    requires_capture                       succeeded                status_mismatch
    succeeded / requires_capture           same status              amount_mismatch when the
                                                                    amounts or currencies differ
    nothing moved (canceled, requires_*)   succeeded,               status_mismatch
                                             requires_capture
    nothing moved                          failed, canceled, absent none

    provider payment without our reference: foreign (counted, never a finding)

    provider refund                        our refund (operation)   finding
    ─────────────────────────────────────  ───────────────────────  ──────────────────────
    names a payment that is not ours       -                        foreign
    succeeded or pending                   none recorded            refund_mismatch (unannounced)
    any                                    processing               none: in flight
    succeeded / pending                    failed                   refund_mismatch
    failed / canceled                      succeeded                refund_mismatch
    same standing                          amounts differ           refund_mismatch

    ours the provider never listed (the last phase), after a direct read proved it absent:
    a payment that moved money                                      missing_at_provider
    a refund that succeeded                                         refund_mismatch

    the trial balance (when the run completes), over the account's payments:
    a payment whose ledger lines do not sum to zero in a currency   ledger_imbalance (ours
                                                                    only: the sum, no
                                                                    provider side)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FindingKind(StrEnum):
    ORPHAN_AT_PROVIDER = "orphan_at_provider"
    MISSING_AT_PROVIDER = "missing_at_provider"
    AMOUNT_MISMATCH = "amount_mismatch"
    STATUS_MISMATCH = "status_mismatch"
    REFUND_MISMATCH = "refund_mismatch"
    LEDGER_IMBALANCE = "ledger_imbalance"


class Verdict(StrEnum):
    """What comparing one provider object said, for the run's counts."""

    MATCHED = "matched"
    FOREIGN = "foreign"
    IN_FLIGHT = "in_flight"
    FINDING = "finding"
    # Read, but nothing in it can be compared without a guess (a balance movement in another
    # currency than ours, a fee or a payout): neither matched nor a finding.
    NOT_COMPARED = "not_compared"


# Provider payment statuses (the protocol's words, ``ProviderPayment.status``) under which
# money is held or moved at the provider.
MONEY_AT_PROVIDER = frozenset({"succeeded", "requires_capture"})
# Provider refund statuses under which the money is (or is on its way) back to the customer.
REFUND_STANDS = frozenset({"succeeded", "pending", "requires_action"})
# Our payment statuses under which payorch says money is held or moved.
OURS_MOVED = frozenset({"succeeded", "requires_capture"})
OURS_IN_FLIGHT = frozenset({"processing"})


@dataclass(frozen=True)
class Side:
    """One side of a comparison as that side states it."""

    id: str | None
    status: str
    amount: int | None
    currency: str | None

    def document(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "amount": self.amount,
            "currency": self.currency,
        }


@dataclass(frozen=True)
class TheirPayment:
    id: str
    status: str
    # What moved (the amount received once succeeded), else what was asked.
    amount: int
    currency: str
    # Our payment id from the provider object's metadata; None: not ours.
    reference: str | None


@dataclass(frozen=True)
class OurPayment:
    id: str
    status: str
    amount: int
    currency: str
    provider_payment_id: str | None
    # What moved: the captured amount once succeeded (0 before).
    amount_captured: int


@dataclass(frozen=True)
class TheirRefund:
    id: str
    provider_payment_id: str
    status: str
    amount: int
    currency: str
    # Our refund (operation) id from the refund's metadata; None: made outside payorch.
    reference: str | None


@dataclass(frozen=True)
class OurRefund:
    id: str
    payment_id: str
    status: str  # processing, succeeded, failed, needs_attention
    amount: int | None
    currency: str
    provider_object_id: str | None


@dataclass(frozen=True)
class Discrepancy:
    kind: FindingKind
    provider_object_id: str
    object_type: str  # payment, refund
    payment_id: str | None
    operation_id: str | None
    ours: Side | None
    theirs: Side | None


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    discrepancy: Discrepancy | None = None


def _their_side(their: TheirPayment | TheirRefund) -> Side:
    return Side(their.id, their.status, their.amount, their.currency)


def _our_payment_side(ours: OurPayment) -> Side:
    moved = ours.amount_captured if ours.status == "succeeded" and ours.amount_captured else None
    return Side(ours.id, ours.status, moved if moved is not None else ours.amount, ours.currency)


def _payment_finding(kind: FindingKind, their: TheirPayment, ours: OurPayment | None) -> Comparison:
    return Comparison(
        Verdict.FINDING,
        Discrepancy(
            kind=kind,
            provider_object_id=their.id,
            object_type="payment",
            payment_id=ours.id if ours else their.reference,
            operation_id=None,
            ours=_our_payment_side(ours) if ours else None,
            theirs=_their_side(their),
        ),
    )


def compare_payment(their: TheirPayment, ours: OurPayment | None) -> Comparison:
    """One provider payment against the payment its reference names (None: none has it)."""
    if their.reference is None:
        return Comparison(Verdict.FOREIGN)
    if ours is not None and ours.status in OURS_IN_FLIGHT:
        return Comparison(Verdict.IN_FLIGHT)
    moved_there = their.status in MONEY_AT_PROVIDER
    if (
        ours is not None
        and ours.provider_payment_id is not None
        and ours.provider_payment_id != their.id
    ):
        # Ours settled through another provider payment: this one moving money too is a
        # second charge for one payment; one that moved nothing is an abandoned attempt.
        if moved_there:
            return _payment_finding(FindingKind.ORPHAN_AT_PROVIDER, their, ours)
        return Comparison(Verdict.MATCHED)
    if ours is None or ours.status not in OURS_MOVED:
        # Absent, failed, canceled or parked here: money there is an orphan, none is fine.
        if moved_there:
            return _payment_finding(FindingKind.ORPHAN_AT_PROVIDER, their, ours)
        return Comparison(Verdict.MATCHED)
    if their.status != ours.status:
        # Both hold or moved money but disagree how far, or the provider moved none.
        return _payment_finding(FindingKind.STATUS_MISMATCH, their, ours)
    our_side = _our_payment_side(ours)
    if their.amount != our_side.amount or their.currency.lower() != ours.currency.lower():
        return _payment_finding(FindingKind.AMOUNT_MISMATCH, their, ours)
    return Comparison(Verdict.MATCHED)


def _refund_finding(their: TheirRefund, ours: OurRefund | None, payment_id: str) -> Comparison:
    return Comparison(
        Verdict.FINDING,
        Discrepancy(
            kind=FindingKind.REFUND_MISMATCH,
            provider_object_id=their.id,
            object_type="refund",
            payment_id=payment_id,
            operation_id=ours.id if ours else their.reference,
            ours=(Side(ours.id, ours.status, ours.amount, ours.currency) if ours else None),
            theirs=_their_side(their),
        ),
    )


def compare_refund(
    their: TheirRefund, payment_id: str | None, ours: OurRefund | None
) -> Comparison:
    """One provider refund against ours: ``payment_id`` is our payment of its provider payment
    (None: the provider payment is not ours), ``ours`` our refund recorded for it."""
    if payment_id is None:
        return Comparison(Verdict.FOREIGN)
    stands_there = their.status in REFUND_STANDS
    if ours is None:
        return (
            _refund_finding(their, None, payment_id)
            if stands_there
            else Comparison(Verdict.MATCHED)
        )
    if ours.status == "processing":
        return Comparison(Verdict.IN_FLIGHT)
    stands_here = ours.status == "succeeded"
    if stands_there != stands_here:
        return _refund_finding(their, ours, payment_id)
    if stands_here and ours.amount is not None and ours.amount != their.amount:
        return _refund_finding(their, ours, payment_id)
    return Comparison(Verdict.MATCHED)


def missing_payment(ours: OurPayment) -> Discrepancy:
    """Ours moved money and a direct read proved the provider has no such payment."""
    return Discrepancy(
        kind=FindingKind.MISSING_AT_PROVIDER,
        provider_object_id=ours.provider_payment_id or ours.id,
        object_type="payment",
        payment_id=ours.id,
        operation_id=None,
        ours=_our_payment_side(ours),
        theirs=None,
    )


def missing_refund(ours: OurRefund) -> Discrepancy:
    """Our refund succeeded and a direct read proved the provider has no such refund."""
    return Discrepancy(
        kind=FindingKind.REFUND_MISMATCH,
        provider_object_id=ours.provider_object_id or ours.id,
        object_type="refund",
        payment_id=ours.payment_id,
        operation_id=ours.id,
        ours=Side(ours.id, ours.status, ours.amount, ours.currency),
        theirs=None,
    )


# A ledger finding's object type; its identity's object is ``<payment id>/<currency>``.
LEDGER_OBJECT = "ledger"


def ledger_imbalance(payment_id: str, currency: str, total: int) -> Discrepancy:
    """A payment's ledger lines sum to ``total`` (not zero) in ``currency``: payorch's books
    disagree with themselves (double entry makes every payment's sum zero)."""
    return Discrepancy(
        kind=FindingKind.LEDGER_IMBALANCE,
        provider_object_id=f"{payment_id}/{currency}",
        object_type=LEDGER_OBJECT,
        payment_id=payment_id,
        operation_id=None,
        ours=Side(payment_id, "unbalanced", total, currency),
        theirs=None,
    )


def ledger_balanced(sums: dict[str, int]) -> bool:
    """Double entry: every currency's ledger lines sum to zero."""
    return all(total == 0 for total in sums.values())


class RunStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class Phase(StrEnum):
    """A run's recovery point, in order: provider payments, provider refunds, the provider's
    balance movements (decision 0108), then ours the provider never listed."""

    PAYMENTS = "payments"
    REFUNDS = "refunds"
    BALANCE = "balance"
    OURS = "ours"
    DONE = "done"


@dataclass(frozen=True)
class RunCounts:
    """What one committed page adds to a run's summary."""

    pages: int = 0
    payments_seen: int = 0
    refunds_seen: int = 0
    matched: int = 0
    foreign: int = 0
    in_flight: int = 0
    findings_new: int = 0
    findings_seen: int = 0

    def plus(self, other: RunCounts) -> RunCounts:
        return RunCounts(
            **{name: getattr(self, name) + getattr(other, name) for name in COUNT_NAMES}
        )

    def document(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNT_NAMES}


COUNT_NAMES = (
    "pages",
    "payments_seen",
    "refunds_seen",
    "matched",
    "foreign",
    "in_flight",
    "findings_new",
    "findings_seen",
)
