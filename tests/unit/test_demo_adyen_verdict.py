"""The demo's Adyen verdict (``devtools.demo.report.judge_adyen``) fails when money is
wrong: payorch's rows against the Adyen simulator's books."""

from __future__ import annotations

from typing import Any

from devtools.demo.report import AdyenPayment, judge_adyen


def authorisation(reference: str, value: int, currency: str = "EUR") -> dict[str, Any]:
    return {
        "kind": "authorisation",
        "pspReference": f"PSP{reference}{value}",
        "paymentPspReference": f"PSP{reference}{value}",
        "reference": reference,
        "amount": {"currency": currency, "value": value},
        "failed": False,
    }


def books(*authorisations: dict[str, Any], cancels: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "authorisations": {"items": list(authorisations)},
        "cancels": {
            "items": [
                {"reference": reference, "amount": {"currency": "EUR", "value": 0}}
                for reference in cancels
            ]
        },
    }


def test_one_authorisation_per_succeeded_payment_at_its_amount_is_clean() -> None:
    rows = [
        AdyenPayment("pay_a", "succeeded", 1200, "eur"),
        AdyenPayment("pay_b", "succeeded", 990, "eur"),
        AdyenPayment("pay_c", "failed", 500, "eur"),
    ]

    tally = judge_adyen(rows, books(authorisation("pay_a", 1200), authorisation("pay_b", 990)), 3)

    assert tally.violations == []
    assert (tally.payments, tally.succeeded, tally.declined) == (3, 2, 1)
    assert tally.money_movements == 2 and tally.faults_injected == 3
    assert tally.duplicates == 0 and tally.stuck == 0 and tally.wrong_amounts == 0


def test_a_second_authorisation_of_one_payment_is_a_duplicate() -> None:
    rows = [AdyenPayment("pay_a", "succeeded", 1200, "eur")]

    tally = judge_adyen(rows, books(authorisation("pay_a", 1200), authorisation("pay_a", 1201)))

    assert tally.duplicates == 1
    assert any("authorised 2 times" in v for v in tally.violations)


def test_a_wrong_amount_or_currency_at_adyen_is_a_violation() -> None:
    rows = [
        AdyenPayment("pay_a", "succeeded", 1200, "eur"),
        AdyenPayment("pay_b", "succeeded", 990, "eur"),
    ]

    tally = judge_adyen(
        rows, books(authorisation("pay_a", 120), authorisation("pay_b", 990, currency="USD"))
    )

    assert tally.wrong_amounts == 2
    assert len(tally.violations) == 2


def test_a_succeeded_payment_adyen_never_authorised_is_a_violation() -> None:
    tally = judge_adyen([AdyenPayment("pay_a", "succeeded", 1200, "eur")], books())

    assert tally.money_movements == 0
    assert tally.violations == ["pay_a succeeded but Adyen holds 0 authorisations for it"]


def test_a_failed_payment_is_clean_only_when_its_authorisation_was_released() -> None:
    rows = [
        AdyenPayment("pay_a", "failed", 1200, "eur"),
        AdyenPayment("pay_b", "failed", 990, "eur"),
    ]
    held = books(authorisation("pay_a", 1200), authorisation("pay_b", 990), cancels=("pay_a",))

    tally = judge_adyen(rows, held)

    assert tally.violations == ["pay_b failed but Adyen holds 1 authorisations for it"]


def test_a_payment_still_processing_is_stuck() -> None:
    tally = judge_adyen([AdyenPayment("pay_a", "processing", 1200, "eur")], books())

    assert tally.stuck == 1
    assert tally.violations
