"""Double-entry ledger lines for a payment outcome (pure).

Every business event books one **entry**: a group of lines for one payment, written in one
transaction (``OutcomeRepository.add_ledger_lines``), whose amounts sum to zero in each
currency.  So a payment's lines, and every currency's lines, always sum to zero
(decision 0101): ``unbalanced`` is the check the writer runs before it writes, and on
PostgreSQL a deferred constraint trigger repeats it at commit (migration 0031).

The provider side books per **connector account** (decision 0105): the account the money
moved at, which is the payment's account once it finished (after a failover, the account of
the attempt that succeeded; the attempts before it moved nothing, or the payment would not
have failed over).  Its captures, cancels and refunds go to the same account and book there.
The platform's own account (a payment with no connector account) carries the name its
circuit, reconciliation and ``payorch status`` already give it (``PLATFORM_CIRCUIT_KEY``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.states import Outcome

# The provider account owes us the captured funds until payout...
PROVIDER_RECEIVABLE = "provider_receivable:{account}"
# ...and we owe them to the merchant.
MERCHANT_PAYABLE = "merchant_payable:{client_id}"
# Manual capture: an authorisation holds the customer's money at the account for the
# merchant, owed to no one yet.  Its lines are reversed in full when it is captured (the
# captured part then moves to the two accounts above) or canceled, so once a payment is
# final these two accounts sum to zero for it.
PROVIDER_AUTHORIZED = "provider_authorized:{account}"
MERCHANT_AUTHORIZED = "merchant_authorized:{client_id}"


def booked_account(connector_account_id: str | None) -> str:
    """The account name a payment's provider-side lines carry (``{account}`` above): its
    connector account, or the platform's own (None)."""
    return connector_account_id or PLATFORM_CIRCUIT_KEY


@dataclass(frozen=True)
class LedgerLine:
    account: str
    amount: int  # signed minor units: debit > 0, credit < 0
    currency: str


class UnbalancedEntry(ValueError):
    """An entry whose lines do not sum to zero in some currency: a bug in the code that
    built it, refused before anything is written."""

    def __init__(self, sums: dict[str, int]) -> None:
        named = ", ".join(f"{currency} {total:+d}" for currency, total in sorted(sums.items()))
        super().__init__(f"ledger entry does not balance: {named}")
        self.sums = sums


def unbalanced(lines: Iterable[LedgerLine]) -> dict[str, int]:
    """Per currency, the sum of ``lines`` where it is not zero (empty: they balance)."""
    sums: Counter[str] = Counter()
    for line in lines:
        sums[line.currency] += line.amount
    return {currency: total for currency, total in sums.items() if total != 0}


def check_balanced(lines: Iterable[LedgerLine]) -> None:
    """Raise ``UnbalancedEntry`` unless ``lines`` sum to zero in every currency."""
    sums = unbalanced(lines)
    if sums:
        raise UnbalancedEntry(sums)


def lines_for(
    outcome: Outcome, *, amount: int, currency: str, account: str, client_id: str
) -> list[LedgerLine]:
    """Two balanced lines for a success (an authorisation under manual capture); nothing
    moves for a failure."""
    if outcome is Outcome.REQUIRES_CAPTURE:
        return authorization_lines(
            amount=amount, currency=currency, account=account, client_id=client_id
        )
    if outcome is not Outcome.SUCCEEDED:
        return []
    return [
        LedgerLine(PROVIDER_RECEIVABLE.format(account=account), amount, currency),
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), -amount, currency),
    ]


def refund_lines(*, amount: int, currency: str, account: str, client_id: str) -> list[LedgerLine]:
    """A succeeded refund reverses the charge's lines for ``amount``: the merchant owes it
    back, the provider pays it out to the customer."""
    return [
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), amount, currency),
        LedgerLine(PROVIDER_RECEIVABLE.format(account=account), -amount, currency),
    ]


def authorization_lines(
    *, amount: int, currency: str, account: str, client_id: str
) -> list[LedgerLine]:
    """Manual capture: ``amount`` authorised, held at the provider, not yet anyone's."""
    return [
        LedgerLine(PROVIDER_AUTHORIZED.format(account=account), amount, currency),
        LedgerLine(MERCHANT_AUTHORIZED.format(client_id=client_id), -amount, currency),
    ]


def release_lines(
    *, authorized: int, currency: str, account: str, client_id: str
) -> list[LedgerLine]:
    """The authorisation ends (captured or canceled): its lines reversed in full."""
    if authorized <= 0:
        return []
    return [
        LedgerLine(MERCHANT_AUTHORIZED.format(client_id=client_id), authorized, currency),
        LedgerLine(PROVIDER_AUTHORIZED.format(account=account), -authorized, currency),
    ]


def capture_lines(
    *, authorized: int, captured: int, currency: str, account: str, client_id: str
) -> list[LedgerLine]:
    """A capture: the authorisation released in full, the captured part booked as a
    charge's success is (the rest goes back to the customer)."""
    return [
        *release_lines(
            authorized=authorized, currency=currency, account=account, client_id=client_id
        ),
        LedgerLine(PROVIDER_RECEIVABLE.format(account=account), captured, currency),
        LedgerLine(MERCHANT_PAYABLE.format(client_id=client_id), -captured, currency),
    ]
