"""Adyen's Settlement details report (CSV) read as the protocol's provider objects, a row at
a time (decision 0106).  Pure: lines in, objects out; the download is
``adyen_settlement_source``.

One row is one movement of money in one payout batch.  What each row becomes::

    Type                Psp Reference   becomes
    ──────────────────  ──────────────  ─────────────────────────────────────────────────────
    Settled             the payment's   ProviderPayment: succeeded, Gross Credit received;
                                        our payment id when Merchant Reference is one
    Refunded            the payment's   ProviderRefund: succeeded, Gross Debit, its id the
                                        Modification Reference; our refund id when
                                        Modification Merchant Reference is one
    RefundedReversed    the payment's   ProviderRefund: failed (the scheme sent it back)
    anything else       -               nothing (chargebacks, fees, payouts, corrections:
                                        not a payment or a refund; disputes reach payorch
                                        by notification)

Hazards:

* **A reference is ours only by its shape** (``pay_…``, ``rfd_…``).  Adyen's Merchant
  Reference is set by every integration on the account; anything else is ``foreign``, never
  an orphan.
* **Amounts are major units** ("12.34"): converted with the currency's ISO 4217 decimals,
  exactly (``Decimal``); a value with more decimals than the currency has is refused rather
  than rounded.
* **Times are local to the account's time zone**, named by an abbreviation (CET, CEST, …).
  An abbreviation not in ``ZONE_OFFSETS`` is refused (``ReportUnreadable``): placing a row
  in or out of the window on a guessed offset could hide it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation

from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.operations import is_refund_id
from orchestrator.providers.base import ProviderPayment, ProviderRefund
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY, REFUND_ID_METADATA_KEY

# The columns a row is read by (the report has more; their order may change, so rows are
# read by header name).
PSP_REFERENCE = "Psp Reference"
MERCHANT_REFERENCE = "Merchant Reference"
CREATION_DATE = "Creation Date"
TIME_ZONE = "TimeZone"
TYPE = "Type"
MODIFICATION_REFERENCE = "Modification Reference"
GROSS_CURRENCY = "Gross Currency"
GROSS_DEBIT = "Gross Debit (GC)"
GROSS_CREDIT = "Gross Credit (GC)"
MODIFICATION_MERCHANT_REFERENCE = "Modification Merchant Reference"
REQUIRED_COLUMNS = (
    PSP_REFERENCE,
    MERCHANT_REFERENCE,
    CREATION_DATE,
    TIME_ZONE,
    TYPE,
    MODIFICATION_REFERENCE,
    GROSS_CURRENCY,
    GROSS_DEBIT,
    GROSS_CREDIT,
    MODIFICATION_MERCHANT_REFERENCE,
)

# The abbreviations Adyen's time zone settings print, and their offsets from UTC in hours.
ZONE_OFFSETS: dict[str, float] = {
    "UTC": 0,
    "GMT": 0,
    "WET": 0,
    "WEST": 1,
    "BST": 1,
    "CET": 1,
    "CEST": 2,
    "EET": 2,
    "EEST": 3,
}
# ISO 4217 minor units where they are not 2.
_DECIMALS = {
    **dict.fromkeys(
        ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND"),
        0,
    ),
    **dict.fromkeys(("VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}


class ReportUnreadable(Exception):
    """The report is not one this reader can read without guessing (a missing column, an
    unknown time zone, an amount it cannot convert exactly)."""


@dataclass(frozen=True, slots=True)
class ReportRow:
    """The columns of one row this reader uses, as the report spells them."""

    type: str
    psp_reference: str
    merchant_reference: str
    modification_reference: str
    modification_merchant_reference: str
    currency: str
    debit: str
    credit: str
    creation_date: str
    time_zone: str

    @property
    def created(self) -> int:
        """Its Creation Date as a Unix timestamp (read only for the rows a phase keeps)."""
        return created_at(self.creation_date, self.time_zone)


def rows(lines: Iterable[str], types: frozenset[str] | None = None) -> Iterator[ReportRow]:
    """The report's rows, in order, read as ``lines`` arrive (nothing is kept); ``types``:
    only rows of these types (the rest are skipped unread: a phase reads a whole report for
    a few of its types)."""
    reader = csv.reader(lines)
    header = [name.strip() for name in next(reader, [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ReportUnreadable(f"the settlement details report lacks the columns {missing}")
    at = [header.index(c) for c in REQUIRED_COLUMNS]
    type_at = header.index(TYPE)
    width = max(at) + 1
    for raw in reader:
        if len(raw) < width:
            if not raw:
                continue
            raw = raw + [""] * (width - len(raw))
        if types is not None and raw[type_at].strip() not in types:
            continue
        psp, ours, created, zone, type_, mod, currency, debit, credit, mod_ours = (
            raw[i].strip() for i in at
        )
        yield ReportRow(
            type=type_,
            psp_reference=psp,
            merchant_reference=ours,
            modification_reference=mod,
            modification_merchant_reference=mod_ours,
            currency=currency.upper(),
            debit=debit,
            credit=credit,
            creation_date=created,
            time_zone=zone,
        )


def created_at(local: str, zone: str) -> int:
    """A row's Creation Date (local time, ``YYYY-MM-DD HH:MM:SS``) as a Unix timestamp."""
    offset = ZONE_OFFSETS.get(zone.strip().upper())
    if offset is None:
        raise ReportUnreadable(f"unknown time zone {zone!r} in the settlement details report")
    try:
        naive = datetime.fromisoformat(local.strip())
    except ValueError:
        raise ReportUnreadable(f"unreadable Creation Date {local!r}") from None
    if naive.tzinfo is not None:
        raise ReportUnreadable(f"unreadable Creation Date {local!r}")
    aware = naive.replace(tzinfo=timezone(timedelta(hours=offset)))
    return int(aware.timestamp())


def minor_units(amount: str, currency: str) -> int:
    """``"12.34"`` EUR -> 1234; exact, or ``ReportUnreadable``."""
    try:
        value = Decimal(amount) * (10 ** _DECIMALS.get(currency, 2))
    except InvalidOperation:
        raise ReportUnreadable(f"unreadable amount {amount!r} {currency}") from None
    if value != value.to_integral_value():
        raise ReportUnreadable(f"{amount} {currency} has more decimals than {currency} has")
    return int(value)


def payment_of(row: ReportRow) -> ProviderPayment | None:
    """A Settled row as the payment whose capture settled; None for any other row."""
    if row.type != "Settled" or not row.psp_reference:
        return None
    received = minor_units(row.credit or "0", row.currency) - minor_units(
        row.debit or "0", row.currency
    )
    ours = is_payment_id(row.merchant_reference)
    return ProviderPayment(
        id=row.psp_reference,
        status="succeeded",
        amount=received,
        currency=row.currency.lower(),
        metadata={RECORD_ID_METADATA_KEY: row.merchant_reference} if ours else {},
        created=row.created,
        amount_received=received,
    )


_REFUND_STATUSES = {"Refunded": "succeeded", "RefundedReversed": "failed"}
# The rows each phase reads (the payout row dates its batch).
PAYMENT_TYPES = frozenset({"Settled", "MerchantPayout"})
REFUND_TYPES = frozenset({*_REFUND_STATUSES, "MerchantPayout"})


def refund_of(row: ReportRow) -> ProviderRefund | None:
    """A Refunded (RefundedReversed) row as a succeeded (failed) refund; None otherwise."""
    status = _REFUND_STATUSES.get(row.type)
    if status is None or not row.modification_reference:
        return None
    amount = abs(
        minor_units(row.debit or "0", row.currency) - minor_units(row.credit or "0", row.currency)
    )
    reference = row.modification_merchant_reference
    return ProviderRefund(
        id=row.modification_reference,
        provider_payment_id=row.psp_reference,
        amount=amount,
        currency=row.currency.lower(),
        status=status,
        metadata={REFUND_ID_METADATA_KEY: reference} if is_refund_id(reference) else {},
        created=row.created,
    )


def payout_closed_at(row: ReportRow) -> int | None:
    """When the batch closed, from its MerchantPayout row (None: another row)."""
    return row.created if row.type == "MerchantPayout" else None
