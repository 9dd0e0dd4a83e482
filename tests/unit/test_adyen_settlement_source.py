"""The Adyen reconciliation source against a fake report host (httpx's function-backed
transport): which batches it reads, in which order, where it stops, how its pages continue
and resume, and how the host's failures map onto the protocol's errors."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest

from devtools.adyen_simulator.settlement import COLUMNS
from orchestrator.providers.adyen_settlement_source import AdyenSettlementSource
from orchestrator.providers.base import OBJECT_UNPROVEN, OutcomeUnknown, Permanent

BASE = "https://reports.test/reports/download"
PREFIX = "/reports/download/MerchantAccount/Shop/settlement_detail_report_batch_"


def stamp(day: int, hour: int = 12) -> str:
    return f"2026-01-{day:02d} {hour:02d}:00:00"


def ts(day: int, hour: int = 12) -> int:
    return int(datetime(2026, 1, day, hour, tzinfo=UTC).timestamp())


def line(type_: str, psp: str, created: str, *, credit: str = "", debit: str = "") -> str:
    values = dict.fromkeys(COLUMNS, "")
    values.update(
        {
            "Psp Reference": psp,
            "Merchant Reference": f"pay_{psp.lower():0>32}"[:36],
            "Creation Date": created,
            "TimeZone": "UTC",
            "Type": type_,
            "Modification Reference": f"M{psp}",
            "Gross Currency": "EUR",
            "Gross Credit (GC)": credit,
            "Gross Debit (GC)": debit,
        }
    )
    return ",".join(values[c] for c in COLUMNS)


class ReportHost:
    """Batches of report lines, served as Adyen serves them; counts each batch's GETs."""

    def __init__(self, batches: dict[int, list[str]], *, status: int = 200) -> None:
        self.batches = batches
        self.status = status
        self.gets: Counter[int] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["X-API-Key"] == "AQE_key"
        number = int(request.url.path.removeprefix(PREFIX).removesuffix(".csv"))
        self.gets[number] += 1
        if self.status != 200:
            return httpx.Response(self.status, json={"status": self.status})
        if number not in self.batches:
            return httpx.Response(404, json={"status": 404})
        body = "\n".join([",".join(COLUMNS), *self.batches[number]]) + "\n"
        return httpx.Response(200, content=body.encode(), headers={"Content-Type": "text/csv"})


def source(host: ReportHost) -> AdyenSettlementSource:
    return AdyenSettlementSource(
        api_key="AQE_key",
        merchant_account="Shop",
        reports_base=BASE,
        connect_timeout=1,
        read_timeout=1,
        transport=httpx.MockTransport(host),
    )


def batch(day: int, *psps: str) -> list[str]:
    """Settled rows created on ``day``, then the payout dated the next morning."""
    rows = [line("Settled", psp, stamp(day), credit="10.00") for psp in psps]
    return [*rows, line("MerchantPayout", "", stamp(day + 1, 4))]


def test_the_newest_batch_is_read_first_and_the_walk_stops_before_the_window() -> None:
    host = ReportHost(
        {
            1: batch(2, "OLDINWINDOW"),  # impossible at Adyen: shows the walk never read it
            2: batch(3, "TOOEARLY"),
            3: batch(10, "A1", "A2"),
            4: batch(11, "B1"),
            5: batch(12, "C1", "C2"),
        }
    )
    read = source(host)

    page = read.list_payments(created_gte=ts(5), created_lte=ts(20), starting_after=None, limit=100)

    assert [p.id for p in page.provider_payments] == ["C1", "C2", "B1", "A1", "A2"]
    assert (page.has_more, page.cursor) == (False, None)
    # Batch 2 (paid out before the window) was read and ended the walk; 1 only probed.
    assert host.gets[1] == 1
    read.close()


def test_pages_continue_the_open_download_and_resume_elsewhere_by_position() -> None:
    host = ReportHost({1: batch(10, "A1", "A2", "A3"), 2: batch(11, "B1", "B2")})
    read = source(host)
    window = {"created_gte": ts(1), "created_lte": ts(20)}

    first = read.list_payments(**window, starting_after=None, limit=2)
    second = read.list_payments(**window, starting_after=first.cursor, limit=2)
    gets_so_far = dict(host.gets)
    # Another process resumes from the stored position with a source of its own.
    elsewhere = source(host)
    rest = elsewhere.list_payments(**window, starting_after=second.cursor, limit=2)

    assert [p.id for p in first.provider_payments] == ["B1", "B2"]
    assert [p.id for p in second.provider_payments] == ["A1", "A2"]
    assert [p.id for p in rest.provider_payments] == ["A3"]
    assert (rest.has_more, rest.cursor) == (False, None)
    assert first.cursor == "2:2" and second.cursor == "1:2"
    # Probes 1, 2, 4 (absent), 3 (absent); then each report read once: the second page
    # went on with the first page's download.
    assert gets_so_far == {1: 2, 2: 2, 3: 1, 4: 1}
    assert host.gets[1] == 3  # the resume opened batch 1 again and skipped two rows
    read.close()
    elsewhere.close()


def test_refunds_are_listed_from_the_same_reports() -> None:
    host = ReportHost(
        {
            1: [
                line("Settled", "P1", stamp(10), credit="10.00"),
                line("Refunded", "P1", stamp(10, 13), debit="4.00"),
            ]
        }
    )
    read = source(host)

    page = read.list_refunds_created(
        created_gte=ts(1), created_lte=ts(20), starting_after=None, limit=10
    )

    assert [(r.id, r.provider_payment_id, r.amount) for r in page.refunds] == [("MP1", "P1", 400)]
    read.close()


def test_an_account_without_a_closed_batch_lists_nothing() -> None:
    read = source(ReportHost({}))

    page = read.list_payments(created_gte=ts(1), created_lte=ts(20), starting_after=None, limit=5)

    assert (page.provider_payments, page.has_more) == ((), False)
    read.close()


def test_absence_is_never_claimed_from_a_report() -> None:
    read = source(ReportHost({}))

    with pytest.raises(Permanent) as payment:
        read.retrieve_payment("PSP1")
    with pytest.raises(Permanent) as refund:
        read.retrieve_refund("MOD1")

    assert payment.value.code == refund.value.code == OBJECT_UNPROVEN
    read.close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(503, OutcomeUnknown), (429, OutcomeUnknown), (401, Permanent), (403, Permanent)],
)
def test_the_hosts_refusals_map_onto_the_protocols_errors(
    status: int, error: type[Exception]
) -> None:
    read = source(ReportHost({1: batch(10, "A1")}, status=status))

    with pytest.raises(error) as raised:
        read.list_payments(created_gte=ts(1), created_lte=ts(20), starting_after=None, limit=5)

    assert getattr(raised.value, "http_status", None) == status
    read.close()


def test_a_network_failure_is_an_unknown_outcome() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    read = AdyenSettlementSource(
        api_key="AQE_key",
        merchant_account="Shop",
        reports_base=BASE,
        connect_timeout=1,
        read_timeout=1,
        transport=httpx.MockTransport(unreachable),
    )

    with pytest.raises(OutcomeUnknown, match="ConnectError"):
        read.list_payments(created_gte=ts(1), created_lte=ts(20), starting_after=None, limit=5)
    read.close()


def test_a_cursor_that_is_not_a_position_is_refused() -> None:
    read = source(ReportHost({1: batch(10, "A1")}))

    with pytest.raises(Permanent, match="cursor"):
        read.list_payments(created_gte=ts(1), created_lte=ts(20), starting_after="PSP1", limit=5)
    read.close()
