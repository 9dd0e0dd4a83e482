"""Reconciliation's comparison of the provider's balance movements (decision 0108): the money
that actually moved in the account's balance for a payment or refund of ours, against what
payorch booked.  Pure functions over plain records, like ``domain.reconciliation``.

The payment and refund lists say what the provider's objects claim; the balance says what
money arrived or left.  So a movement is compared only on what the lists cannot show, and
its finding takes the identity the lists' finding for the same discrepancy would take (the
provider payment's or refund's id, not the movement's): one discrepancy seen by both is one
finding, the second sighting lands on the first's row.

    movement (its source)              ours (by the source's id)    result
    ─────────────────────────────────  ───────────────────────────  ──────────────────────────
    payment, refund, refund_reversal   none holds it, and it        foreign (counted, never a
                                         carries no reference of      finding)
                                         ours
                                       none holds it, but it is     not compared here: the
                                         ours by reference            lists compared its provider
                                                                    payment or refund (an orphan,
                                                                    an unannounced refund) by
                                                                    that same reference
    any                                processing                   in flight
    payment (money in for a charge)    failed, canceled, parked     orphan_at_provider
                                       requires_capture             status_mismatch
                                       succeeded, same currency,    amount_mismatch
                                         amount ≠ amount captured
    refund (money out, negative)       succeeded, same currency,    refund_mismatch
                                         -amount ≠ our amount
    refund_reversal (money back)       succeeded                    refund_mismatch (it failed
                                                                    after all)
    payment / refund                   another currency than ours   not compared: the provider
                                                                    converted, and payorch holds
                                                                    no rate to check it with
    other (fees, payouts, dispute      -                            not compared
      adjustments)
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.reconciliation import (
    OURS_IN_FLIGHT,
    Comparison,
    Discrepancy,
    FindingKind,
    OurPayment,
    OurRefund,
    Side,
    Verdict,
)

PAYMENT = "payment"
REFUND = "refund"
REFUND_REVERSAL = "refund_reversal"
# How a movement's side reads in a finding (its status there).
THEIR_STATUS = "in_balance"


@dataclass(frozen=True)
class TheirMovement:
    id: str
    # payment, refund, refund_reversal, other (``BalanceMovement.kind``)
    kind: str
    # Signed: + into the balance, - out of it.
    amount: int
    currency: str
    # The provider charge or refund it moved for; None: the provider names none.
    source: str | None
    # Whether its source is ours by our reference (our id in its metadata, or a refund of a
    # charge of ours), though no row of ours holds the source itself.
    claimed: bool = False


def _their_side(their: TheirMovement) -> Side:
    return Side(their.id, THEIR_STATUS, their.amount, their.currency)


def _same_currency(their: TheirMovement, currency: str) -> bool:
    return their.currency.lower() == currency.lower()


def compare_payment_movement(their: TheirMovement, ours: OurPayment | None) -> Comparison:
    """Money in for a charge against the payment of ours that holds that charge."""
    if ours is None:
        return Comparison(Verdict.NOT_COMPARED if their.claimed else Verdict.FOREIGN)
    if ours.status in OURS_IN_FLIGHT:
        return Comparison(Verdict.IN_FLIGHT)
    if ours.status == "succeeded":
        if not _same_currency(their, ours.currency):
            return Comparison(Verdict.NOT_COMPARED)
        if their.amount == ours.amount_captured:
            return Comparison(Verdict.MATCHED)
        kind = FindingKind.AMOUNT_MISMATCH
    elif ours.status == "requires_capture":
        kind = FindingKind.STATUS_MISMATCH  # captured there, only authorised here
    else:
        kind = FindingKind.ORPHAN_AT_PROVIDER  # money moved for a payment that failed here
    moved = ours.amount_captured if ours.status == "succeeded" else ours.amount
    return Comparison(
        Verdict.FINDING,
        Discrepancy(
            kind=kind,
            provider_object_id=ours.provider_payment_id or their.id,
            object_type="payment",
            payment_id=ours.id,
            operation_id=None,
            ours=Side(ours.id, ours.status, moved, ours.currency),
            theirs=_their_side(their),
        ),
    )


def compare_refund_movement(their: TheirMovement, ours: OurRefund | None) -> Comparison:
    """Money out for a refund (or back for a failed one) against our refund of it."""
    if ours is None:
        return Comparison(Verdict.NOT_COMPARED if their.claimed else Verdict.FOREIGN)
    if ours.status == "processing":
        return Comparison(Verdict.IN_FLIGHT)
    if ours.status != "succeeded":
        # A refund that failed there moved out and back (two movements); ours failed or
        # parked says nothing the refund list did not already compare.
        return Comparison(Verdict.MATCHED)
    if their.kind == REFUND:
        if not _same_currency(their, ours.currency):
            return Comparison(Verdict.NOT_COMPARED)
        if ours.amount is None or -their.amount == ours.amount:
            return Comparison(Verdict.MATCHED)
    return Comparison(
        Verdict.FINDING,
        Discrepancy(
            kind=FindingKind.REFUND_MISMATCH,
            provider_object_id=ours.provider_object_id or their.id,
            object_type="refund",
            payment_id=ours.payment_id,
            operation_id=ours.id,
            ours=Side(ours.id, ours.status, ours.amount, ours.currency),
            theirs=_their_side(their),
        ),
    )


def compare_movement(
    their: TheirMovement, payment: OurPayment | None, refund: OurRefund | None
) -> Comparison:
    """One movement against ours its source names (``payment`` for a charge, ``refund`` for
    a refund)."""
    if their.kind == PAYMENT:
        return compare_payment_movement(their, payment)
    if their.kind in (REFUND, REFUND_REVERSAL):
        return compare_refund_movement(their, refund)
    return Comparison(Verdict.NOT_COMPARED)
