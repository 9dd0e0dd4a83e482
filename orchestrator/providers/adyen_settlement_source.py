"""An Adyen account's reconciliation source (``base.ReconciliationSource``, decisions 0093 and
0106): its Settlement details reports, streamed.  Read top to bottom.

Which reports: every closed payout batch that can hold a row created in the window, newest
first.  Each batch's report is at::

    {reports_base}/MerchantAccount/{merchantAccount}/settlement_detail_report_batch_{n}.csv

with the account's API key (``X-API-Key``); a batch not closed yet answers 404.

    1. the newest batch: probe n = 1, 2, 4, … until one is absent, then bisect between the
       last present and the first absent (batch numbers are consecutive): about 2·log2(n)
       requests, each closed after its status line, no report read;
    2. read batch n, then n-1, …: each row a line at a time (``adyen_settlement.rows``),
       kept only while it is in the window (by its Creation Date) and of the phase's kind;
    3. stop after the batch whose MerchantPayout row is dated before the window starts: a
       row is created before its batch closes, so every older batch closed before the
       window too; a batch without a payout row (nothing paid out) never stops the walk;
       batch 1 always does.

The cursor (``…Page.cursor``, stored by the run) is ``{batch}:{rows read}`` (rows of the
phase's types: Settled, or Refunded and RefundedReversed, and the payout row).  The next page
continues the open download when it asks for the position this source stopped at (the
usual case: one pass over each report per phase); a run resumed elsewhere opens the batch
again and skips that many rows, read and dropped.  Memory is one page and one CSV row.

Absence cannot be proven from a settlement report: a payment captured and not yet paid out
is in no batch.  So ``retrieve_payment`` / ``retrieve_refund`` raise ``Permanent`` with
``OBJECT_UNPROVEN``, and the engine counts such an object of ours as in flight, never as
``missing_at_provider`` (never on a guess).

Errors: a transport failure, 429 or 5xx is ``OutcomeUnknown`` (the run stops at its last
page and resumes); 401/403, a 404 for a batch the probe found, or a report this reader cannot
read without guessing (``ReportUnreadable``) is ``Permanent``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TypeVar

import httpx

from orchestrator.providers.adyen_settlement import (
    PAYMENT_TYPES,
    REFUND_TYPES,
    ReportRow,
    ReportUnreadable,
    payment_of,
    payout_closed_at,
    refund_of,
    rows,
)
from orchestrator.providers.base import (
    OBJECT_UNPROVEN,
    BalanceMovementPage,
    OutcomeUnknown,
    Permanent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
)
from orchestrator.providers.http_pools import trusted_context

# Adyen's report host for live accounts (a test account's is ``Settings.adyen_reports_base``).
LIVE_REPORTS_BASE = "https://ca-live.adyen.com/reports/download"
# A code for ``Permanent`` when a report cannot be read without guessing.
REPORT_UNREADABLE = "report_unreadable"
# Probing stops here: an account with more payout batches than this is not believed.
_MAX_BATCH = 1 << 40

T = TypeVar("T", ProviderPayment, ProviderRefund)


@dataclass
class _Open:
    """The download this source is part way through."""

    kind: str
    batch: int
    read: int
    rows: Iterator[ReportRow]
    closed_at: int | None = None
    stack: ExitStack = field(default_factory=ExitStack)


class AdyenSettlementSource:
    name = "adyen"

    def __init__(
        self,
        *,
        api_key: str,
        merchant_account: str,
        reports_base: str,
        connect_timeout: float,
        read_timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._merchant_account = merchant_account
        self._base = reports_base.rstrip("/")
        self._http = httpx.Client(
            headers={"X-API-Key": api_key, "User-Agent": "payorch"},
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            transport=transport,
            verify=trusted_context() if transport is None else True,
            trust_env=transport is None,
        )
        self._open: _Open | None = None
        self._newest: int | None = None

    # -- the protocol ---------------------------------------------------------------------

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        found, cursor = self._page(
            "payments", payment_of, created_gte, created_lte, starting_after, limit
        )
        return ProviderPaymentPage(tuple(found), has_more=cursor is not None, cursor=cursor)

    def list_refunds_created(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> RefundPage:
        found, cursor = self._page(
            "refunds", refund_of, created_gte, created_lte, starting_after, limit
        )
        return RefundPage(tuple(found), has_more=cursor is not None, cursor=cursor)

    def list_balance_movements(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> BalanceMovementPage:
        """Nothing more to read (decision 0108): a settlement report's rows already are the
        money that moved (``Settled`` its Gross Credit, ``Refunded`` its Gross Debit), and
        they were compared as the payments and refunds above."""
        return BalanceMovementPage((), has_more=False)

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment:
        raise Permanent(
            f"Adyen payment {provider_payment_id} is in no settlement report read; a report "
            "cannot prove it absent (it may not be paid out yet)",
            code=OBJECT_UNPROVEN,
        )

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        raise Permanent(
            f"Adyen refund {refund_id} is in no settlement report read; a report cannot "
            "prove it absent (it may not be paid out yet)",
            code=OBJECT_UNPROVEN,
        )

    def close(self) -> None:
        self._drop()
        self._http.close()

    # -- pages ----------------------------------------------------------------------------

    def _page(
        self,
        kind: str,
        convert: Callable[[ReportRow], T | None],
        gte: int,
        lte: int,
        starting_after: str | None,
        limit: int,
    ) -> tuple[list[T], str | None]:
        """Up to ``limit`` objects and the cursor after them (None: the walk is over)."""
        try:
            return self._fill(kind, convert, gte, lte, starting_after, limit)
        except ReportUnreadable as error:
            self._drop()
            raise Permanent(str(error), code=REPORT_UNREADABLE) from None
        except httpx.TransportError as error:
            self._drop()
            raise OutcomeUnknown(
                f"Network error reading Adyen's settlement details report: "
                f"{type(error).__name__}: {error}"
            ) from None
        except BaseException:
            self._drop()
            raise

    def _fill(
        self,
        kind: str,
        convert: Callable[[ReportRow], T | None],
        gte: int,
        lte: int,
        starting_after: str | None,
        limit: int,
    ) -> tuple[list[T], str | None]:
        if starting_after is None:
            batch, skip = self._newest_batch(), 0
        else:
            batch, skip = _parse_cursor(starting_after)
        found: list[T] = []
        while batch > 0:
            reading = self._reading(kind, batch, skip)
            for row in reading.rows:
                reading.read += 1
                closed = payout_closed_at(row)
                if closed is not None:
                    reading.closed_at = closed
                made = convert(row)
                # ``created`` is set from the row's Creation Date by both conversions.
                if made is not None and made.created is not None and gte <= made.created <= lte:
                    found.append(made)
                    if len(found) >= limit:
                        return found, f"{reading.batch}:{reading.read}"
            self._drop()
            if batch == 1 or (reading.closed_at is not None and reading.closed_at < gte):
                break
            batch, skip = batch - 1, 0
        return found, None

    def _reading(self, kind: str, batch: int, skip: int) -> _Open:
        """The open download at (batch, skip), continued, or opened and skipped to."""
        held = self._open
        if held is not None and (held.kind, held.batch, held.read) == (kind, batch, skip):
            return held
        self._drop()
        stack = ExitStack()
        response = stack.enter_context(self._http.stream("GET", self._url(batch)))
        try:
            _check(response, batch)
            lines = _with_newlines(response.iter_lines())
            types = PAYMENT_TYPES if kind == "payments" else REFUND_TYPES
            reading = _Open(kind, batch, 0, rows(lines, types), stack=stack)
            for _ in range(skip):
                row = next(reading.rows, None)
                if row is None:
                    raise ReportUnreadable(f"batch {batch} has fewer than {skip} rows now")
                reading.read += 1
                closed = payout_closed_at(row)
                if closed is not None:
                    reading.closed_at = closed
        except BaseException:
            stack.close()
            raise
        self._open = reading
        return reading

    def _drop(self) -> None:
        if self._open is not None:
            self._open.stack.close()
            self._open = None

    # -- the newest batch -----------------------------------------------------------------

    def _newest_batch(self) -> int:
        """The highest batch number whose report exists (0: none yet)."""
        if self._newest is not None:
            return self._newest
        if not self._exists(1):
            self._newest = 0
            return 0
        present, absent = 1, 2
        while self._exists(absent):
            present, absent = absent, absent * 2
            if absent > _MAX_BATCH:
                raise Permanent("Adyen lists more settlement batches than believable")
        while absent - present > 1:
            middle = (present + absent) // 2
            if self._exists(middle):
                present = middle
            else:
                absent = middle
        self._newest = present
        return present

    def _exists(self, batch: int) -> bool:
        with self._http.stream("GET", self._url(batch)) as response:
            if response.status_code == 404:
                return False
            _check(response, batch)
            return True

    def _url(self, batch: int) -> str:
        return (
            f"{self._base}/MerchantAccount/{self._merchant_account}/"
            f"settlement_detail_report_batch_{batch}.csv"
        )


def _check(response: httpx.Response, batch: int) -> None:
    status = response.status_code
    if status == 200:
        return
    what = f"Adyen's settlement details report batch {batch} answered HTTP {status}"
    if status == 429 or status >= 500:
        raise OutcomeUnknown(what, http_status=status)
    raise Permanent(what, http_status=status)


def _parse_cursor(cursor: str) -> tuple[int, int]:
    batch, _, read = cursor.partition(":")
    if not (batch.isdigit() and read.isdigit()) or int(batch) < 1:
        raise Permanent(f"not a settlement report cursor: {cursor!r}", code=REPORT_UNREADABLE)
    return int(batch), int(read)


def _with_newlines(lines: Iterator[str]) -> Iterator[str]:
    # ``csv`` needs the line ends back to read a quoted field across lines.
    for line in lines:
        yield line + "\n"
