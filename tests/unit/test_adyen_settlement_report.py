"""Adyen's Settlement details report read as provider objects (``adyen_settlement``), row by
row: the documented sample rows, our references by their shape, amounts in each currency's
decimals, times in the account's zone, and the reports the reader refuses to guess at."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devtools.adyen_simulator.settlement import COLUMNS as SIMULATOR_COLUMNS
from orchestrator.providers.adyen_settlement import (
    REQUIRED_COLUMNS,
    ReportRow,
    ReportUnreadable,
    payment_of,
    payout_closed_at,
    refund_of,
    rows,
)
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY, REFUND_ID_METADATA_KEY

HEADER = ",".join(SIMULATOR_COLUMNS)
# The sample rows of Adyen's "Settlement details report" page (a capture settled in GBP).
SETTLED_SAMPLE = (
    "TestCompany,TestMerchant,1813702551707653,3vpzf7,visa,2013-06-03 11:26:49,CET,Settled,"
    "1713702551795048,GBP,,5.00,1,GBP,,4.88,,0.04,0.01,0.07,visaclassic,,,,,,,,,"
)
OUR_PAYMENT = "pay_" + "a" * 32
OUR_REFUND = "rfd_" + "b" * 32


def read(*lines: str, header: str = HEADER) -> list[ReportRow]:
    return list(rows(line + "\n" for line in (header, *lines)))


def row(
    type_: str,
    *,
    reference: str = OUR_PAYMENT,
    modification_reference: str = "",
    debit: str = "",
    credit: str = "",
    currency: str = "EUR",
    created: str = "2026-01-15 10:00:00",
    zone: str = "CET",
) -> str:
    values = dict.fromkeys(SIMULATOR_COLUMNS, "")
    values.update(
        {
            "Psp Reference": "PSP0000000000001",
            "Merchant Reference": reference,
            "Creation Date": created,
            "TimeZone": zone,
            "Type": type_,
            "Modification Reference": "MOD0000000000001",
            "Gross Currency": currency,
            "Gross Debit (GC)": debit,
            "Gross Credit (GC)": credit,
            "Modification Merchant Reference": modification_reference,
        }
    )
    return ",".join(values[c] for c in SIMULATOR_COLUMNS)


def test_the_documented_settled_row_is_a_succeeded_payment_that_is_not_ours() -> None:
    [sample] = read(SETTLED_SAMPLE)

    payment = payment_of(sample)

    assert payment is not None
    assert (payment.id, payment.status, payment.amount_received) == (
        "1813702551707653",
        "succeeded",
        500,
    )
    assert payment.currency == "gbp"
    # 11:26:49 CET is 10:26:49 UTC.
    assert payment.created == int(datetime(2013, 6, 3, 10, 26, 49, tzinfo=UTC).timestamp())
    # "3vpzf7" is another integration's reference: not ours, so foreign, never an orphan.
    assert payment.metadata == {}
    assert refund_of(sample) is None


def test_a_settled_row_with_our_payment_id_carries_it_as_our_reference() -> None:
    [settled] = read(row("Settled", credit="42.00", created="2026-07-01 12:00:00", zone="CEST"))

    payment = payment_of(settled)

    assert payment is not None
    assert payment.metadata == {RECORD_ID_METADATA_KEY: OUR_PAYMENT}
    assert (payment.amount, payment.amount_received) == (4200, 4200)
    assert payment.created == int(datetime(2026, 7, 1, 10, 0, tzinfo=UTC).timestamp())


def test_refunded_rows_are_refunds_of_the_payment_and_a_reversed_one_failed() -> None:
    refunded, reversed_ = read(
        row("Refunded", debit="5.00", modification_reference=OUR_REFUND),
        row("RefundedReversed", credit="5.00", modification_reference="ticket-9"),
    )

    made = refund_of(refunded)
    undone = refund_of(reversed_)

    assert made is not None and undone is not None
    assert (made.id, made.provider_payment_id) == ("MOD0000000000001", "PSP0000000000001")
    assert (made.status, made.amount, made.currency) == ("succeeded", 500, "eur")
    assert made.metadata == {REFUND_ID_METADATA_KEY: OUR_REFUND}
    assert (undone.status, undone.amount, undone.metadata) == ("failed", 500, {})
    assert payment_of(refunded) is None


@pytest.mark.parametrize("type_", ["Chargeback", "ChargebackReversed", "Fee", "MerchantPayout"])
def test_rows_that_are_neither_a_payment_nor_a_refund_become_nothing(type_: str) -> None:
    [other] = read(row(type_, debit="1.00"))

    assert (payment_of(other), refund_of(other)) == (None, None)


def test_the_payout_row_dates_the_batch() -> None:
    payout, settled = read(
        row("MerchantPayout", created="2026-01-15 04:00:00", zone="UTC"),
        row("Settled", credit="1.00"),
    )

    assert payout_closed_at(payout) == int(datetime(2026, 1, 15, 4, tzinfo=UTC).timestamp())
    assert payout_closed_at(settled) is None


@pytest.mark.parametrize(
    ("amount", "currency", "minor"), [("1500", "JPY", 1500), ("1.234", "KWD", 1234)]
)
def test_amounts_use_the_currencys_own_decimals(amount: str, currency: str, minor: int) -> None:
    [settled] = read(row("Settled", credit=amount, currency=currency))

    payment = payment_of(settled)

    assert payment is not None and payment.amount == minor


def test_columns_are_read_by_name_whatever_their_order_and_quoting() -> None:
    reordered = list(reversed(SIMULATOR_COLUMNS))
    values = dict.fromkeys(SIMULATOR_COLUMNS, "")
    values.update(
        {
            "Psp Reference": "PSP9",
            "Merchant Reference": '"a, quoted ""reference"""',
            "Creation Date": "2026-01-15 10:00:00",
            "TimeZone": "UTC",
            "Type": "Settled",
            "Gross Currency": "EUR",
            "Gross Credit (GC)": "2.50",
        }
    )
    [settled] = read(",".join(values[c] for c in reordered), header=",".join(reordered))

    assert settled.merchant_reference == 'a, quoted "reference"'
    payment = payment_of(settled)
    assert payment is not None and (payment.id, payment.amount) == ("PSP9", 250)


def test_an_unknown_time_zone_is_refused_rather_than_guessed() -> None:
    [settled] = read(row("Settled", credit="1.00", zone="XYZT"))

    with pytest.raises(ReportUnreadable, match="time zone"):
        payment_of(settled)


def test_an_amount_finer_than_its_currency_is_refused_rather_than_rounded() -> None:
    [settled] = read(row("Settled", credit="12.345", currency="EUR"))

    with pytest.raises(ReportUnreadable, match="decimals"):
        payment_of(settled)


def test_a_report_without_a_needed_column_is_refused() -> None:
    header = ",".join(c for c in SIMULATOR_COLUMNS if c != "Modification Reference")

    with pytest.raises(ReportUnreadable, match="Modification Reference"):
        read(header=header)


def test_the_simulator_serves_every_column_the_reader_needs() -> None:
    assert set(REQUIRED_COLUMNS) <= set(SIMULATOR_COLUMNS)
    assert len(SIMULATOR_COLUMNS) == 30  # Adyen's standard columns, Reserved4..10 included
