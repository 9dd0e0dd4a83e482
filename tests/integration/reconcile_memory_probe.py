"""A process that reconciles a generated Adyen settlement report of ``n`` objects, or holds
``n`` of its objects, and prints its peak resident memory as JSON: ``VmHWM`` of
``/proc/self/status``, this program's own (``ru_maxrss`` is not: Linux carries it across
``exec``, so a child of a large test process would report its parent's peak).  Run by
``test_reconciliation_memory``; one process per measurement, so each peak is its own.

    python -m tests.integration.reconcile_memory_probe run  N DATABASE_URL
    python -m tests.integration.reconcile_memory_probe hold N DATABASE_URL

``hold`` first reconciles a small report (the same warm-up as ``run`` gets from its own
first pages: connections, statement caches), then reads N objects into a list: what a
run that loads its window whole would hold."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from devtools.adyen_simulator.settlement import COLUMNS
from orchestrator.domain.reconciliation_records import Run
from orchestrator.engine.reconcile import Account, Reconciler, Window
from orchestrator.providers.adyen_settlement import payment_of, rows
from orchestrator.providers.adyen_settlement_source import AdyenSettlementSource
from tests.harness.containers import build_container

CREATED = datetime(2026, 1, 15, 12, tzinfo=UTC)
WINDOW = Window(CREATED - timedelta(hours=1), CREATED + timedelta(hours=1))
WARM_UP = 2_000
PAGE_SIZE = 1_000


def report_lines(n: int) -> Iterator[str]:
    """Batch 1's report: the header, ``n`` settled captures of another integration (each
    counted foreign: the comparison, not the findings table, is what grows), the payout.
    Made a line at a time."""
    yield ",".join(COLUMNS) + "\n"
    filler = [""] * (len(COLUMNS) - 23)
    for i in range(n):
        psp = f"{i:016d}"
        values = ["Co", "Big", psp, f"order-{i}", "visa", "2026-01-15 12:00:00", "UTC"]
        values += ["Settled", psp, "EUR", "", "10.00", "1", "EUR", "", "9.90", "0.10"]
        values += ["", "", "", "visaclassic", "", "1", *filler]
        yield ",".join(values) + "\n"
    payout = ["Co", "Big", "", "", "", "2026-01-16 04:00:00", "UTC", "MerchantPayout"]
    yield ",".join(payout + [""] * (len(COLUMNS) - len(payout))) + "\n"


def chunks(lines: Iterator[str], size: int = 200) -> Iterator[bytes]:
    """The body as a network read delivers it: many lines a chunk, never the whole."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield "".join(chunk).encode()
            chunk = []
    yield "".join(chunk).encode()


def source(n: int) -> AdyenSettlementSource:
    def host(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("settlement_detail_report_batch_1.csv"):
            return httpx.Response(404)
        return httpx.Response(200, content=chunks(report_lines(n)))

    return AdyenSettlementSource(
        api_key="AQE_key",
        merchant_account="Big",
        reports_base="https://reports.test/reports/download",
        connect_timeout=1,
        read_timeout=1,
        transport=httpx.MockTransport(host),
    )


def reconcile(database_url: str, account: str, n: int) -> Run:
    container = build_container(database_url)
    read = source(n)
    try:
        return Reconciler(
            container.uow,
            read,
            Account(account, account, "adyen"),
            owner="probe",
            page_size=PAGE_SIZE,
        ).run(WINDOW)
    finally:
        read.close()
        container.close()


def main(mode: str, n: int, database_url: str) -> dict[str, object]:
    if mode == "run":
        run = reconcile(database_url, "ca_run", n)
        out: dict[str, object] = {"status": run.status.value, **run.counts.document()}
    else:
        reconcile(database_url, "ca_hold", WARM_UP)
        held = [p for p in map(payment_of, rows(report_lines(n))) if p is not None]
        out = {"held": len(held)}
    out["peak_kib"] = peak_resident_kib()
    return out


def peak_resident_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
