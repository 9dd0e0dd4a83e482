"""Every entry the ledger's builders make balances per currency, and the writer's check
(``check_balanced``) refuses one that does not, naming each currency's sum (decision 0101)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.ledger import (
    LedgerLine,
    UnbalancedEntry,
    authorization_lines,
    capture_lines,
    check_balanced,
    lines_for,
    refund_lines,
    release_lines,
    unbalanced,
)
from orchestrator.domain.reconciliation import FindingKind, Side, ledger_imbalance
from orchestrator.domain.states import Outcome

amounts = st.integers(min_value=0, max_value=10**12)
currencies = st.sampled_from(["usd", "eur", "jpy"])
WHO = {"account": "ca_platform_stripe", "client_id": "cli_1"}


@settings(max_examples=200, derandomize=True, database=None)
@given(
    outcome=st.sampled_from(list(Outcome)),
    authorized=amounts,
    captured=amounts,
    currency=currencies,
)
def test_every_entry_the_builders_make_balances(
    outcome: Outcome, authorized: int, captured: int, currency: str
) -> None:
    entries = [
        lines_for(outcome, amount=authorized, currency=currency, **WHO),
        refund_lines(amount=captured, currency=currency, **WHO),
        authorization_lines(amount=authorized, currency=currency, **WHO),
        release_lines(authorized=authorized, currency=currency, **WHO),
        capture_lines(authorized=authorized, captured=captured, currency=currency, **WHO),
    ]
    for entry in entries:
        assert unbalanced(entry) == {}
        check_balanced(entry)


def test_an_entry_out_of_balance_is_refused_with_each_currencys_sum() -> None:
    entry = [
        LedgerLine("provider_receivable:stripe", 1000, "usd"),
        LedgerLine("merchant_payable:cli_1", -900, "usd"),
        LedgerLine("provider_receivable:stripe", 5, "eur"),
        LedgerLine("merchant_payable:cli_1", -5, "eur"),
    ]

    with pytest.raises(UnbalancedEntry, match=r"usd \+100") as refused:
        check_balanced(entry)

    assert refused.value.sums == {"usd": 100}


def test_a_zero_total_across_currencies_is_not_a_balance() -> None:
    entry = [
        LedgerLine("provider_receivable:stripe", 500, "usd"),
        LedgerLine("merchant_payable:cli_1", -500, "eur"),
    ]

    assert unbalanced(entry) == {"usd": 500, "eur": -500}


def test_a_ledger_imbalance_names_the_payment_the_currency_and_the_sum() -> None:
    found = ledger_imbalance("pay_1", "usd", -250)

    assert found.kind is FindingKind.LEDGER_IMBALANCE
    assert (found.provider_object_id, found.object_type, found.payment_id) == (
        "pay_1/usd",
        "ledger",
        "pay_1",
    )
    assert found.ours == Side("pay_1", "unbalanced", -250, "usd")
    assert found.theirs is None
