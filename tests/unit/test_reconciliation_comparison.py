"""The comparison's decision table (``domain.reconciliation``), row by row: one provider
object gives at most one finding, of its most specific kind."""

from __future__ import annotations

import pytest

from orchestrator.domain.reconciliation import (
    FindingKind,
    OurPayment,
    OurRefund,
    TheirPayment,
    TheirRefund,
    Verdict,
    compare_payment,
    compare_refund,
    ledger_balanced,
    missing_payment,
    missing_refund,
)


def theirs(
    status: str = "succeeded", amount: int = 2500, reference: str | None = "pay_1"
) -> TheirPayment:
    return TheirPayment("pi_1", status, amount, "usd", reference)


def ours(status: str = "succeeded", captured: int = 2500, pi: str | None = "pi_1") -> OurPayment:
    return OurPayment("pay_1", status, 2500, "usd", pi, captured)


def kind_of(result: object) -> FindingKind | Verdict:
    discrepancy = getattr(result, "discrepancy", None)
    return discrepancy.kind if discrepancy is not None else result.verdict  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("their_status", "our", "expected"),
    [
        ("succeeded", ours(), Verdict.MATCHED),
        ("succeeded", None, FindingKind.ORPHAN_AT_PROVIDER),
        ("succeeded", ours("failed", 0), FindingKind.ORPHAN_AT_PROVIDER),
        ("succeeded", ours("canceled", 0), FindingKind.ORPHAN_AT_PROVIDER),
        ("succeeded", ours("needs_attention", 0), FindingKind.ORPHAN_AT_PROVIDER),
        ("requires_capture", ours("failed", 0), FindingKind.ORPHAN_AT_PROVIDER),
        ("succeeded", ours(pi="pi_other"), FindingKind.ORPHAN_AT_PROVIDER),
        ("canceled", ours(pi="pi_other"), Verdict.MATCHED),
        ("succeeded", ours("processing", 0), Verdict.IN_FLIGHT),
        ("requires_payment_method", ours("processing", 0), Verdict.IN_FLIGHT),
        ("succeeded", ours("requires_capture", 0), FindingKind.STATUS_MISMATCH),
        ("requires_capture", ours(), FindingKind.STATUS_MISMATCH),
        ("canceled", ours(), FindingKind.STATUS_MISMATCH),
        ("requires_capture", ours("requires_capture", 0), Verdict.MATCHED),
        ("requires_payment_method", ours("failed", 0), Verdict.MATCHED),
        ("requires_payment_method", None, Verdict.MATCHED),
    ],
)
def test_a_provider_payment_against_ours(
    their_status: str, our: OurPayment | None, expected: FindingKind | Verdict
) -> None:
    assert kind_of(compare_payment(theirs(their_status), our)) == expected


def test_a_provider_payment_without_our_reference_is_foreign_whatever_it_did() -> None:
    assert compare_payment(theirs(reference=None), None).verdict is Verdict.FOREIGN


def test_an_amount_or_currency_that_differs_is_an_amount_mismatch_naming_both_sides() -> None:
    result = compare_payment(theirs(amount=2400), ours())
    assert result.discrepancy is not None
    assert result.discrepancy.kind is FindingKind.AMOUNT_MISMATCH
    assert result.discrepancy.ours is not None and result.discrepancy.ours.amount == 2500
    assert result.discrepancy.theirs is not None and result.discrepancy.theirs.amount == 2400
    other_currency = TheirPayment("pi_1", "succeeded", 2500, "eur", "pay_1")
    assert kind_of(compare_payment(other_currency, ours())) is FindingKind.AMOUNT_MISMATCH


def test_an_orphan_is_not_also_a_status_mismatch() -> None:
    result = compare_payment(theirs(), ours("failed", 0))
    assert result.verdict is Verdict.FINDING
    assert result.discrepancy is not None
    assert result.discrepancy.kind is FindingKind.ORPHAN_AT_PROVIDER
    assert result.discrepancy.payment_id == "pay_1"


def refund(status: str = "succeeded", amount: int = 500, ref: str | None = None) -> TheirRefund:
    return TheirRefund("re_1", "pi_1", status, amount, "usd", ref)


def our_refund(status: str = "succeeded", amount: int | None = 500) -> OurRefund:
    return OurRefund("rfd_1", "pay_1", status, amount, "usd", "re_1")


@pytest.mark.parametrize(
    ("their", "payment_id", "our", "expected"),
    [
        (refund(), None, None, Verdict.FOREIGN),
        (refund(), "pay_1", None, FindingKind.REFUND_MISMATCH),
        (refund("pending"), "pay_1", None, FindingKind.REFUND_MISMATCH),
        (refund("failed"), "pay_1", None, Verdict.MATCHED),
        (refund(), "pay_1", our_refund(), Verdict.MATCHED),
        (refund(), "pay_1", our_refund("processing"), Verdict.IN_FLIGHT),
        (refund(), "pay_1", our_refund("failed"), FindingKind.REFUND_MISMATCH),
        (refund("failed"), "pay_1", our_refund(), FindingKind.REFUND_MISMATCH),
        (refund("failed"), "pay_1", our_refund("failed"), Verdict.MATCHED),
        (refund(amount=400), "pay_1", our_refund(), FindingKind.REFUND_MISMATCH),
    ],
)
def test_a_provider_refund_against_ours(
    their: TheirRefund,
    payment_id: str | None,
    our: OurRefund | None,
    expected: FindingKind | Verdict,
) -> None:
    assert kind_of(compare_refund(their, payment_id, our)) == expected


def test_ours_the_provider_lacks_name_what_we_recorded() -> None:
    payment = missing_payment(ours())
    assert (payment.kind, payment.provider_object_id, payment.theirs) == (
        FindingKind.MISSING_AT_PROVIDER,
        "pi_1",
        None,
    )
    gone = missing_refund(our_refund())
    assert (gone.kind, gone.provider_object_id, gone.operation_id) == (
        FindingKind.REFUND_MISMATCH,
        "re_1",
        "rfd_1",
    )


def test_the_ledger_balances_only_when_every_currency_sums_to_zero() -> None:
    assert ledger_balanced({"usd": 0, "eur": 0})
    assert ledger_balanced({})
    assert not ledger_balanced({"usd": 0, "eur": 5})
