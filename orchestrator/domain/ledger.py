"""Double-entry ledger lines for a payment outcome (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.states import Outcome

# The provider owes us the captured funds until payout...
PROVIDER_RECEIVABLE = "provider_receivable:{provider}"
# ...and we owe them to the merchant.
MERCHANT_PAYABLE = "merchant_payable:{client_id}"


@dataclass(frozen=True)
class LedgerLine:
    account: str
    amount: int  # signed minor units: debit > 0, credit < 0
    currency: str


def lines_for(
    outcome: Outcome, *, amount: int, currency: str, provider: str, client_id: str
) -> list[LedgerLine]:
    """Two balanced lines for a success; nothing moves for a failure."""
    if outcome is not Outcome.SUCCEEDED:
        return []
    return [
        LedgerLine(PROVIDER_RECEIVABLE.format(provider=provider), amount, currency),
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), -amount, currency),
    ]


def refund_lines(*, amount: int, currency: str, provider: str, client_id: str) -> list[LedgerLine]:
    """A succeeded refund reverses the charge's lines for ``amount``: the merchant owes it
    back, the provider pays it out to the customer."""
    return [
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), amount, currency),
        LedgerLine(PROVIDER_RECEIVABLE.format(provider=provider), -amount, currency),
    ]
