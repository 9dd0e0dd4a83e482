"""The balance movements' decision table (``domain.reconciliation_balance``, decision 0108),
row by row, and how a Stripe balance transaction becomes a movement."""

from __future__ import annotations

import pytest

from orchestrator.domain.reconciliation import (
    Comparison,
    FindingKind,
    OurPayment,
    OurRefund,
    Verdict,
)
from orchestrator.domain.reconciliation_balance import TheirMovement, compare_movement
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY, REFUND_ID_METADATA_KEY
from orchestrator.providers.stripe_objects import parse_balance_transaction


def movement(
    kind: str = "payment",
    amount: int = 2500,
    currency: str = "usd",
    *,
    claimed: bool = False,
) -> TheirMovement:
    source = "re_1" if kind.startswith("refund") else "ch_1"
    return TheirMovement("txn_1", kind, amount, currency, source, claimed)


def payment(status: str = "succeeded", captured: int = 2500) -> OurPayment:
    return OurPayment("pay_1", status, 2500, "usd", "pi_1", captured)


def refund(status: str = "succeeded", amount: int = 700) -> OurRefund:
    return OurRefund("rfd_1", "pay_1", status, amount, "usd", "re_1")


def kind_of(result: Comparison) -> FindingKind | Verdict:
    return result.discrepancy.kind if result.discrepancy is not None else result.verdict


@pytest.mark.parametrize(
    ("their", "our", "expected"),
    [
        (movement(), payment(), Verdict.MATCHED),
        (movement(amount=2400), payment(), FindingKind.AMOUNT_MISMATCH),
        (movement(currency="eur", amount=2300), payment(), Verdict.NOT_COMPARED),
        (movement(), payment("processing", 0), Verdict.IN_FLIGHT),
        (movement(), payment("requires_capture", 0), FindingKind.STATUS_MISMATCH),
        (movement(), payment("failed", 0), FindingKind.ORPHAN_AT_PROVIDER),
        (movement(), payment("needs_attention", 0), FindingKind.ORPHAN_AT_PROVIDER),
        (movement(), None, Verdict.FOREIGN),
        (movement(claimed=True), None, Verdict.NOT_COMPARED),
    ],
)
def test_a_payment_movement_against_the_payment_holding_its_charge(
    their: TheirMovement, our: OurPayment | None, expected: FindingKind | Verdict
) -> None:
    assert kind_of(compare_movement(their, our, None)) == expected


@pytest.mark.parametrize(
    ("their", "our", "expected"),
    [
        (movement("refund", -700), refund(), Verdict.MATCHED),
        (movement("refund", -600), refund(), FindingKind.REFUND_MISMATCH),
        (movement("refund", -640, "eur"), refund(), Verdict.NOT_COMPARED),
        (movement("refund", -700), refund("processing"), Verdict.IN_FLIGHT),
        (movement("refund", -700), refund("failed"), Verdict.MATCHED),
        (movement("refund_reversal", 700), refund("failed"), Verdict.MATCHED),
        (movement("refund_reversal", 700), refund(), FindingKind.REFUND_MISMATCH),
        (movement("refund", -700), None, Verdict.FOREIGN),
        (movement("refund", -700, claimed=True), None, Verdict.NOT_COMPARED),
    ],
)
def test_a_refund_movement_against_our_refund(
    their: TheirMovement, our: OurRefund | None, expected: FindingKind | Verdict
) -> None:
    assert kind_of(compare_movement(their, None, our)) == expected


def test_fees_payouts_and_adjustments_are_not_compared() -> None:
    assert compare_movement(movement("other", -50), payment(), refund()).verdict is (
        Verdict.NOT_COMPARED
    )


def test_a_finding_takes_the_identity_the_lists_would_give_it() -> None:
    """One discrepancy seen by a list and by the balance is one finding: the provider
    payment's (refund's) id, not the movement's."""
    found = compare_movement(movement(amount=2400), payment(), None).discrepancy
    assert found is not None
    assert (found.provider_object_id, found.object_type, found.payment_id) == (
        "pi_1",
        "payment",
        "pay_1",
    )
    assert found.theirs is not None and (found.theirs.id, found.theirs.amount) == ("txn_1", 2400)
    assert found.ours is not None and found.ours.amount == 2500
    refunded = compare_movement(movement("refund", -600), None, refund()).discrepancy
    assert refunded is not None
    assert (refunded.provider_object_id, refunded.operation_id) == ("re_1", "rfd_1")


def _txn(type_: str, source: object) -> dict[str, object]:
    return {
        "id": "txn_1",
        "type": type_,
        "amount": -700,
        "currency": "usd",
        "created": 1,
        "source": source,
    }


def test_a_stripe_balance_transaction_reads_our_reference_from_its_expanded_source() -> None:
    charge = parse_balance_transaction(
        _txn(
            "charge",
            {"id": "ch_1", "object": "charge", "metadata": {RECORD_ID_METADATA_KEY: "pay_1"}},
        )
    )
    assert (charge.kind, charge.source, charge.reference) == ("payment", "ch_1", "pay_1")
    ours = parse_balance_transaction(
        _txn(
            "refund",
            {
                "id": "re_1",
                "object": "refund",
                "charge": "ch_1",
                "metadata": {REFUND_ID_METADATA_KEY: "rfd_1"},
            },
        )
    )
    assert (ours.kind, ours.reference, ours.refunded_charge) == ("refund", "rfd_1", "ch_1")
    dashboard = parse_balance_transaction(
        _txn("refund", {"id": "re_2", "object": "refund", "charge": "ch_1", "metadata": {}})
    )
    assert (dashboard.reference, dashboard.refunded_charge) == (None, "ch_1")
    assert parse_balance_transaction(_txn("payment_failure_refund", "pyr_1")).kind == (
        "refund_reversal"
    )
    assert parse_balance_transaction(_txn("adjustment", "du_1")).kind == "other"
