"""Is this intent ours?  Every field the record fixes, one at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.engine.kinds.payment_match import ExpectedPayment, payment_mismatches, reject
from orchestrator.providers.base import PaymentError, ProviderPayment

EXPECTED = ExpectedPayment(
    record_id="pay_1", amount=23001, currency="usd", payment_method="pm_1RealMethod"
)


def ours(**changes: object) -> ProviderPayment:
    intent = ProviderPayment(
        id="pi_1",
        status="requires_confirmation",
        amount=23001,
        currency="usd",
        metadata={"payorch_record_id": "pay_1", "order": "7"},
        payment_method="pm_1RealMethod",
    )
    return replace(intent, **changes)  # type: ignore[arg-type]


def test_the_intent_we_asked_for_matches():
    assert payment_mismatches(ours(), EXPECTED) == ()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"amount": 523001}, "amount"),
        ({"currency": "eur"}, "currency"),
        ({"customer": "cus_someone"}, "customer"),
        ({"capture_method": "manual"}, "capture_method"),
        ({"payment_method": "pm_1Other"}, "payment_method"),
        ({"payment_method": None}, "no payment method"),
        ({"metadata": {"payorch_record_id": "pay_2"}}, "metadata"),
        ({"metadata": {}}, "metadata"),
        ({"status": "succeeded", "amount_received": 100}, "amount_received"),
    ],
)
def test_any_difference_from_the_record_is_a_mismatch(changes, field):
    problems = payment_mismatches(ours(**changes), EXPECTED)

    assert len(problems) == 1
    assert problems[0].startswith(field)


def test_currency_letter_case_does_not_matter():
    assert payment_mismatches(ours(currency="USD"), EXPECTED) == ()


def test_automatic_async_is_the_same_capture_as_automatic():
    assert payment_mismatches(ours(capture_method="automatic_async"), EXPECTED) == ()


def test_a_succeeded_intent_that_received_the_amount_matches():
    assert payment_mismatches(ours(status="succeeded", amount_received=23001), EXPECTED) == ()


def test_a_declined_intent_is_matched_by_the_payment_method_its_failed_attempt_used():
    declined = ours(
        status="requires_payment_method",
        payment_method=None,
        last_payment_error=PaymentError("card_declined", "generic_decline", "no", "pm_1RealMethod"),
    )
    assert payment_mismatches(declined, EXPECTED) == ()


def test_a_test_token_becomes_a_fresh_method_so_only_its_presence_is_checked():
    expected = replace(EXPECTED, payment_method="pm_card_visa")

    assert payment_mismatches(ours(payment_method="pm_1FreshFromToken"), expected) == ()
    assert payment_mismatches(ours(payment_method=None), expected) == ("no payment method",)


def test_the_wrong_amount_and_currency_are_both_reported():
    problems = payment_mismatches(ours(amount=1, currency="eur"), EXPECTED)

    assert [p.split()[0] for p in problems] == ["amount", "currency"]


def test_a_rejected_intent_keeps_what_ops_need_to_see():
    intent = ours(amount=523001)
    rejected = reject(intent, payment_mismatches(intent, EXPECTED))

    assert rejected.to_json() == {
        "id": "pi_1",
        "status": "requires_confirmation",
        "amount": 523001,
        "currency": "usd",
        "reasons": ["amount 523001 != 23001"],
    }
    assert "pi_1" in rejected.describe() and "523001" in rejected.describe()
