"""Double-entry ledger lines for a payment outcome (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.states import Outcome

# The provider owes us the captured funds until payout...
PROVIDER_RECEIVABLE = "provider_receivable:{provider}"
# ...and we owe them to the merchant.
MERCHANT_PAYABLE = "merchant_payable:{client_id}"
# Manual capture: an authorisation holds the customer's money at the provider for the
# merchant, owed to no one yet.  Its lines are reversed in full when it is captured (the
# captured part then moves to the two accounts above) or canceled, so once a payment is
# final these two accounts sum to zero for it.
PROVIDER_AUTHORIZED = "provider_authorized:{provider}"
MERCHANT_AUTHORIZED = "merchant_authorized:{client_id}"


@dataclass(frozen=True)
class LedgerLine:
    account: str
    amount: int  # signed minor units: debit > 0, credit < 0
    currency: str


def lines_for(
    outcome: Outcome, *, amount: int, currency: str, provider: str, client_id: str
) -> list[LedgerLine]:
    """Two balanced lines for a success (an authorisation under manual capture); nothing
    moves for a failure."""
    if outcome is Outcome.REQUIRES_CAPTURE:
        return authorization_lines(
            amount=amount, currency=currency, provider=provider, client_id=client_id
        )
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


def authorization_lines(
    *, amount: int, currency: str, provider: str, client_id: str
) -> list[LedgerLine]:
    """Manual capture: ``amount`` authorised, held at the provider, not yet anyone's."""
    return [
        LedgerLine(PROVIDER_AUTHORIZED.format(provider=provider), amount, currency),
        LedgerLine(MERCHANT_AUTHORIZED.format(client_id=client_id), -amount, currency),
    ]


def release_lines(
    *, authorized: int, currency: str, provider: str, client_id: str
) -> list[LedgerLine]:
    """The authorisation ends (captured or canceled): its lines reversed in full."""
    if authorized <= 0:
        return []
    return [
        LedgerLine(MERCHANT_AUTHORIZED.format(client_id=client_id), authorized, currency),
        LedgerLine(PROVIDER_AUTHORIZED.format(provider=provider), -authorized, currency),
    ]


def capture_lines(
    *, authorized: int, captured: int, currency: str, provider: str, client_id: str
) -> list[LedgerLine]:
    """A capture: the authorisation released in full, the captured part booked as a
    charge's success is (the rest goes back to the customer)."""
    return [
        *release_lines(
            authorized=authorized, currency=currency, provider=provider, client_id=client_id
        ),
        LedgerLine(PROVIDER_RECEIVABLE.format(provider=provider), captured, currency),
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), -captured, currency),
    ]
