"""Settlement batches and the Settlement details report, made from the account's own books.

A payable batch closes when told (``POST /_sim/settlement/close``, Adyen's payout schedule in
real life): every movement that pays out and is not in a batch yet joins it, with the
batch's close time.  Its report is served under Adyen's download URL shape::

    GET /reports/download/MerchantAccount/{merchantAccount}/settlement_detail_report_batch_{n}.csv

authenticated by the account's API key (``X-API-Key``), 404 for a batch not closed yet.
What pays out, one line each, in the order it happened:

    movement                                   Type        Psp Reference / Modification Reference
    capture (manual capture)                   Settled     the payment's / the capture's
    authorisation of an auto-captured payment  Settled     the payment's / the payment's
    refund                                     Refunded    the payment's / the refund's
    chargeback                                 Chargeback  the payment's / the chargeback's

then one ``MerchantPayout`` line: the batch's net total, dated when the batch closed.  A
late failure (CAPTURE_FAILED, REFUND_FAILED) before the batch closes keeps the movement out.

The columns are the report's standard 30 (docs.adyen.com, "Settlement details report"); the
amounts are major units with the currency's decimals; times are in the account's time zone
(``AdyenSimulatorConfig.report_time_zone``) with its abbreviation in ``TimeZone``.  The
commission (1% of the gross, ours) only makes Net differ from Gross, as it does at Adyen.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from devtools.adyen_simulator.state import AccountState, Movement

COLUMNS = (
    "Company Account",
    "Merchant Account",
    "Psp Reference",
    "Merchant Reference",
    "Payment Method",
    "Creation Date",
    "TimeZone",
    "Type",
    "Modification Reference",
    "Gross Currency",
    "Gross Debit (GC)",
    "Gross Credit (GC)",
    "Exchange Rate",
    "Net Currency",
    "Net Debit (NC)",
    "Net Credit (NC)",
    "Commission (NC)",
    "Markup (NC)",
    "Scheme Fees (NC)",
    "Interchange (NC)",
    "Payment Method Variant",
    "Modification Merchant Reference",
    "Batch Number",
    "Reserved4",
    "Reserved5",
    "Reserved6",
    "Reserved7",
    "Reserved8",
    "Reserved9",
    "Reserved10",
)
COMPANY_ACCOUNT = "PayorchCompany"
# ISO 4217 minor units where they are not 2 (the simulator's currencies).
_DECIMALS = {"JPY": 0, "KRW": 0, "BHD": 3, "KWD": 3}
_TYPES = {"capture": "Settled", "authorisation": "Settled", "refund": "Refunded"}


@dataclass(frozen=True)
class Batch:
    number: int
    closed_at: dt.datetime
    movements: tuple[Movement, ...]


def pays_out(state: AccountState, movement: Movement) -> bool:
    if movement.failed or movement.batch is not None:
        return False
    if movement.kind == "authorisation":
        payment = state.payments.get(movement.payment_psp_reference)
        return payment is not None and not payment.manual_capture
    return movement.kind in ("capture", "refund", "chargeback")


def close_batch(state: AccountState, batches: list[Batch]) -> Batch:
    """Close the open batch: everything that pays out and is in no batch yet."""
    number = len(batches) + 1
    members = [m for m in state.movements if pays_out(state, m)]
    for movement in members:
        movement.batch = number
    batch = Batch(number, dt.datetime.now(dt.UTC), tuple(members))
    batches.append(batch)
    return batch


def _major(value: int, currency: str) -> str:
    decimals = _DECIMALS.get(currency.upper(), 2)
    sign = "-" if value < 0 else ""
    whole, part = divmod(abs(value), 10**decimals)
    return f"{sign}{whole}.{part:0{decimals}d}" if decimals else f"{sign}{whole}"


def _local(at: dt.datetime, zone: ZoneInfo) -> tuple[str, str]:
    local = at.astimezone(zone)
    return local.strftime("%Y-%m-%d %H:%M:%S"), local.tzname() or "UTC"


def report_lines(
    state: AccountState, batch: Batch, merchant_account: str, time_zone: str
) -> Iterator[str]:
    """The batch's report, a CSV line at a time (header first)."""
    zone = ZoneInfo(time_zone)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")

    def line(values: list[str]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(values)
        return buffer.getvalue()

    yield line(list(COLUMNS))
    net_by_currency: dict[str, int] = {}
    for movement in batch.movements:
        payment = state.payments.get(movement.payment_psp_reference)
        credit = movement.kind in ("capture", "authorisation")
        commission = movement.value // 100 if credit else 0
        net = movement.value - commission
        net_by_currency[movement.currency] = net_by_currency.get(movement.currency, 0) + (
            net if credit else -net
        )
        created, zone_name = _local(movement.at, zone)
        gross = _major(movement.value, movement.currency)
        row = [
            COMPANY_ACCOUNT,
            merchant_account,
            movement.payment_psp_reference,
            movement.reference,
            payment.brand if payment else "",
            created,
            zone_name,
            _TYPES.get(movement.kind, "Chargeback"),
            movement.psp_reference,
            movement.currency,
            "" if credit else gross,
            gross if credit else "",
            "1",
            movement.currency,
            "" if credit else _major(net, movement.currency),
            _major(net, movement.currency) if credit else "",
            _major(commission, movement.currency),
            "",
            "",
            "",
            f"{payment.brand}classic" if payment else "",
            movement.modification_reference or "",
            str(batch.number),
        ]
        yield line(row + [""] * (len(COLUMNS) - len(row)))
    closed, zone_name = _local(batch.closed_at, zone)
    for currency, net in sorted(net_by_currency.items()):
        row = [COMPANY_ACCOUNT, merchant_account, "", "", "", closed, zone_name]
        row += ["MerchantPayout", "", "", "", "", "", currency]
        row += [_major(net, currency) if net > 0 else ""] + [""] * 7
        row += [str(batch.number)]
        yield line(row + [""] * (len(COLUMNS) - len(row)))
