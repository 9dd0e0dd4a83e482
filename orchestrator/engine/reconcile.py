"""A reconciliation run (decisions 0092, 0093): one connector account's provider objects
created in a window against our rows, streamed a page at a time.  Read top to bottom.

Each step is one page and two parts, never one transaction across the network:

    1. read one page from the provider (no transaction open);
    2. in one short unit of work: read our rows the page names, compare (``domain.
       reconciliation``), insert its findings (on their identity: a page read twice adds
       none), remember the ours it saw (``reconciliation_matches``), and move the run's
       recovery point (``phase``, ``cursor``) with the page's counts, guarded by the lease
       token (``Fenced``: another process took the run over; this page is discarded).

The phases, in order (the run's recovery point)::

    payments  provider payments created in the window, newest first; cursor = the last one
              (or the position the source's page names, ``…Page.cursor``)
    refunds   provider refunds created in the window, newest first; cursor = the same
    balance   the provider's balance movements created in the window (decision 0108: the
              money that actually moved for a charge or refund, ``domain.
              reconciliation_balance``), newest first; cursor = the same
    ours      ours created in the window that moved money and that the provider never
              listed, by id; each is read directly by id before it is called missing (a
              list proves presence, only a read proves absence; a source that cannot
              prove it, ``OBJECT_UNPROVEN``, leaves it in flight); cursor = the last id
    done      the trial balance: the ledger's per-currency sums, and each of the account's
              payments out of balance a ``ledger_imbalance`` finding; the run is completed

Memory is bounded by one page, whatever the window holds: nothing of a page outlives its
step except the cursor and the counts in the run's row.  A run stopped anywhere (killed,
provider unreachable, its page budget spent) resumes from its last committed page:
``start_or_resume`` finds the account's unfinished run over the same window and takes it
over once its lease has run out (at once when this process released it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.reconciliation import (
    Comparison,
    Discrepancy,
    OurPayment,
    OurRefund,
    Phase,
    RunCounts,
    RunStatus,
    TheirPayment,
    TheirRefund,
    Verdict,
    compare_payment,
    compare_refund,
    ledger_balanced,
    ledger_imbalance,
    missing_payment,
    missing_refund,
)
from orchestrator.domain.reconciliation_balance import TheirMovement, compare_movement
from orchestrator.domain.reconciliation_records import Run
from orchestrator.engine.lease import Fenced
from orchestrator.logging import get_logger
from orchestrator.providers.base import (
    OBJECT_MISSING,
    OBJECT_UNPROVEN,
    BalanceMovement,
    Permanent,
    ProviderError,
    ProviderPayment,
    ProviderRefund,
    ReconciliationSource,
)
from orchestrator.providers.keys import RECORD_ID_METADATA_KEY, REFUND_ID_METADATA_KEY

log = get_logger(__name__)

# One page of provider objects (the largest page the providers' list calls give).  Bounds
# the memory of a step and the size of its transaction; smaller only costs round trips.
DEFAULT_PAGE_SIZE = 100
# How long a run's holder may go without committing a page before another process may take
# the run over.  Too short: a slow page read (the provider's read timeout) lets a second
# process take over and the first one's page is discarded (fenced: harmless, wasted);
# too long: a killed run waits this long before anyone can resume it.
DEFAULT_LEASE_SECONDS = 120.0


class SourceUnavailable(Exception):
    """The provider could not be read (unknown outcome, rate limit, refusal): the run stays
    ``running`` at its last committed page, its lease released, to be resumed."""

    def __init__(self, run: Run, error: ProviderError) -> None:
        super().__init__(f"{run.connector_account}: {error}")
        self.run = run
        self.error = error


class RunBusy(Exception):
    """Another process holds this account's unfinished run over the window (its lease has
    not run out)."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id} is held by another process")
        self.run = run


@dataclass(frozen=True)
class Account:
    """The account a run reconciles: its key (``ca_…``; the platform's own account has
    ``PLATFORM_CIRCUIT_KEY``), our column's value for it (None: the platform's), its
    provider."""

    key: str
    account_id: str | None
    provider: str


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def created_gte(self) -> int:
        return int(self.start.timestamp())

    @property
    def created_lte(self) -> int:
        return int(self.end.timestamp())


@dataclass(frozen=True)
class _Page:
    """What one step writes."""

    discrepancies: tuple[Discrepancy, ...]
    matches: tuple[str, ...]
    counts: RunCounts
    phase: Phase
    cursor: str | None


def their_payment(payment: ProviderPayment) -> TheirPayment:
    moved = payment.amount_received if payment.status == "succeeded" else None
    return TheirPayment(
        id=payment.id,
        status=payment.status,
        amount=moved if moved else payment.amount,
        currency=payment.currency,
        reference=payment.metadata.get(RECORD_ID_METADATA_KEY) or None,
    )


def their_refund(refund: ProviderRefund) -> TheirRefund:
    return TheirRefund(
        id=refund.id,
        provider_payment_id=refund.provider_payment_id,
        status=refund.status,
        amount=refund.amount,
        currency=refund.currency,
        reference=refund.metadata.get(REFUND_ID_METADATA_KEY) or None,
    )


def their_movement(movement: BalanceMovement, *, claimed: bool) -> TheirMovement:
    return TheirMovement(
        id=movement.id,
        kind=movement.kind,
        amount=movement.amount,
        currency=movement.currency,
        source=movement.source,
        claimed=claimed,
    )


def _tally(comparisons: list[Comparison], **seen: int) -> RunCounts:
    verdicts = [c.verdict for c in comparisons]
    return RunCounts(
        pages=1,
        matched=verdicts.count(Verdict.MATCHED),
        foreign=verdicts.count(Verdict.FOREIGN),
        in_flight=verdicts.count(Verdict.IN_FLIGHT),
        **seen,
    )


class Reconciler:
    """Runs one account's reconciliation.  ``max_pages``: stop (resumable) after that many
    pages in this call (None: run to the end)."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        source: ReconciliationSource,
        account: Account,
        *,
        owner: str,
        page_size: int = DEFAULT_PAGE_SIZE,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_pages: int | None = None,
    ) -> None:
        self._uow = uow
        self._source = source
        self._account = account
        self._owner = owner
        self._page_size = page_size
        self._lease = timedelta(seconds=lease_seconds)
        self._max_pages = max_pages

    # -- the run ------------------------------------------------------------------------------

    def start_or_resume(self, window: Window) -> Run:
        """The account's unfinished run over this window, taken over; else a new run."""
        with self._uow() as uow:
            now = uow.now()
            repo = uow.reconciliation
            found = repo.unfinished_run(self._account.key, window.start, window.end)
            if found is not None:
                taken = repo.take_over(
                    found.id, owner=self._owner, locked_until=now + self._lease, now=now
                )
                if taken is None:
                    raise RunBusy(found)
                uow.commit()
                log.info("reconciliation_resumed", run=taken.id, phase=taken.phase.value)
                return taken
            run = repo.create_run(
                connector_account=self._account.key,
                provider=self._account.provider,
                window_start=window.start,
                window_end=window.end,
                owner=self._owner,
                locked_until=now + self._lease,
                now=now,
            )
            uow.commit()
            return run

    def run(self, window: Window) -> Run:
        """Start or resume the window's run and step it to the end (or the page budget)."""
        run = self.start_or_resume(window)
        pages = 0
        while run.phase is not Phase.DONE:
            if self._max_pages is not None and pages >= self._max_pages:
                return self._release(run)
            try:
                page = self._read_page(run, window)
            except ProviderError as error:
                raise SourceUnavailable(self._release(run), error) from error
            run = self._write_page(run, page)
            pages += 1
        return self._finish(run)

    # -- 1. read a page (no transaction open) ---------------------------------------------------

    def _read_page(self, run: Run, window: Window) -> _Page:
        if run.phase is Phase.PAYMENTS:
            return self._payments_page(run, window)
        if run.phase is Phase.REFUNDS:
            return self._refunds_page(run, window)
        if run.phase is Phase.BALANCE:
            return self._balance_page(run, window)
        return self._ours_page(run, window)

    def _payments_page(self, run: Run, window: Window) -> _Page:
        listed = self._source.list_payments(
            created_gte=window.created_gte,
            created_lte=window.created_lte,
            starting_after=run.cursor,
            limit=self._page_size,
        )
        theirs = [their_payment(p) for p in listed.provider_payments]
        with self._uow() as uow:
            ours = uow.reconciliation.payments_by_id(t.reference for t in theirs if t.reference)
        comparisons = [
            compare_payment(t, ours.get(t.reference) if t.reference else None) for t in theirs
        ]
        matches = tuple(
            ours[t.reference].id
            for t in theirs
            if t.reference in ours and ours[t.reference].provider_payment_id == t.id
        )
        return self._page(
            comparisons,
            matches,
            _tally(comparisons, payments_seen=len(theirs)),
            next_phase=Phase.REFUNDS,
            has_more=listed.has_more,
            last=listed.cursor or (theirs[-1].id if theirs else None),
        )

    def _refunds_page(self, run: Run, window: Window) -> _Page:
        listed = self._source.list_refunds_created(
            created_gte=window.created_gte,
            created_lte=window.created_lte,
            starting_after=run.cursor,
            limit=self._page_size,
        )
        theirs = [their_refund(r) for r in listed.refunds]
        with self._uow() as uow:
            repo = uow.reconciliation
            payments = repo.payments_by_provider_id(
                (t.provider_payment_id for t in theirs), self._account.account_id
            )
            by_provider_id = repo.refunds_by_provider_id(t.id for t in theirs)
            by_reference = repo.refunds_by_id(t.reference for t in theirs if t.reference)
        comparisons: list[Comparison] = []
        matches: list[str] = []
        for t in theirs:
            payment = payments.get(t.provider_payment_id)
            ours = by_provider_id.get(t.id) or (by_reference.get(t.reference or ""))
            comparisons.append(compare_refund(t, payment.id if payment else None, ours))
            if ours is not None:
                matches.append(ours.id)
        return self._page(
            comparisons,
            tuple(matches),
            _tally(comparisons, refunds_seen=len(theirs)),
            next_phase=Phase.BALANCE,
            has_more=listed.has_more,
            last=listed.cursor or (theirs[-1].id if theirs else None),
        )

    def _balance_page(self, run: Run, window: Window) -> _Page:
        listed = self._source.list_balance_movements(
            created_gte=window.created_gte,
            created_lte=window.created_lte,
            starting_after=run.cursor,
            limit=self._page_size,
        )
        movements = listed.movements
        charges = [c for m in movements for c in (m.source, m.refunded_charge) if c]
        with self._uow() as uow:
            repo = uow.reconciliation
            # A source id is a charge or a refund; looking each up as both costs one query
            # each and needs no guess from the id's shape.
            payments = repo.payments_by_charge_id(charges, self._account.account_id)
            refunds = repo.refunds_by_provider_id(m.source for m in movements if m.source)
        theirs = [
            their_movement(
                m,
                claimed=m.reference is not None
                or (m.refunded_charge is not None and m.refunded_charge in payments),
            )
            for m in movements
        ]
        comparisons = [
            compare_movement(
                t,
                payments.get(t.source) if t.source else None,
                refunds.get(t.source) if t.source else None,
            )
            for t in theirs
        ]
        return self._page(
            comparisons,
            (),
            _tally(comparisons),
            next_phase=Phase.OURS,
            has_more=listed.has_more,
            last=listed.cursor or (theirs[-1].id if theirs else None),
        )

    def _ours_page(self, run: Run, window: Window) -> _Page:
        # One cursor for both kinds of ours: payment ids (pay_…) sort before refund ids
        # (rfd_…), so a cursor past the last payment reads refunds next, and a refund cursor
        # reads no payment again.
        with self._uow() as uow:
            repo = uow.reconciliation
            payments = repo.unmatched_payments(
                run.id,
                self._account.account_id,
                created_from=window.start,
                created_to=window.end,
                after_id=run.cursor,
                limit=self._page_size,
            )
            refunds: list[OurRefund] = []
            if not payments:
                refunds = repo.unmatched_refunds(
                    run.id,
                    self._account.account_id,
                    created_from=window.start,
                    created_to=window.end,
                    after_id=run.cursor,
                    limit=self._page_size,
                )
        comparisons = [self._read_our_payment(ours) for ours in payments]
        comparisons += [self._read_our_refund(ours) for ours in refunds]
        last = payments[-1].id if payments else (refunds[-1].id if refunds else None)
        return self._page(
            comparisons,
            (),
            _tally(comparisons),
            next_phase=Phase.DONE,
            has_more=last is not None,
            last=last,
        )

    def _read_our_payment(self, ours: OurPayment) -> Comparison:
        """Ours the window's list did not show (created at the provider after the window, or
        absent): read it by id; only a read that says "no such object" proves absence."""
        if ours.provider_payment_id is None:
            return Comparison(Verdict.FINDING, missing_payment(ours))
        try:
            read = self._source.retrieve_payment(ours.provider_payment_id)
        except Permanent as error:
            if error.code == OBJECT_MISSING:
                return Comparison(Verdict.FINDING, missing_payment(ours))
            if error.code == OBJECT_UNPROVEN:
                # The source cannot prove it absent (not paid out yet, or never): a later
                # run compares it; never a finding on a guess.
                return Comparison(Verdict.IN_FLIGHT)
            raise
        return compare_payment(their_payment(read), ours)

    def _read_our_refund(self, ours: OurRefund) -> Comparison:
        if ours.provider_object_id is None:
            return Comparison(Verdict.FINDING, missing_refund(ours))
        try:
            read = self._source.retrieve_refund(ours.provider_object_id)
        except Permanent as error:
            if error.code == OBJECT_MISSING:
                return Comparison(Verdict.FINDING, missing_refund(ours))
            if error.code == OBJECT_UNPROVEN:
                return Comparison(Verdict.IN_FLIGHT)
            raise
        return compare_refund(their_refund(read), ours.payment_id, ours)

    def _page(
        self,
        comparisons: list[Comparison],
        matches: tuple[str, ...],
        counts: RunCounts,
        *,
        next_phase: Phase,
        has_more: bool,
        last: str | None,
    ) -> _Page:
        found = tuple(c.discrepancy for c in comparisons if c.discrepancy is not None)
        if has_more and last is not None:
            current = {
                Phase.REFUNDS: Phase.PAYMENTS,
                Phase.BALANCE: Phase.REFUNDS,
                Phase.OURS: Phase.BALANCE,
            }.get(next_phase, Phase.OURS)
            return _Page(found, matches, counts, current, last)
        return _Page(found, matches, counts, next_phase, None)

    # -- 2. write the page (one short transaction, fenced) ------------------------------------

    def _write_page(self, run: Run, page: _Page) -> Run:
        with self._uow() as uow:
            now = uow.now()
            repo = uow.reconciliation
            new, seen = repo.record(run.id, page.discrepancies, run.connector_account, now)
            repo.add_matches(run.id, page.matches)
            counts = RunCounts(findings_new=new, findings_seen=seen).plus(page.counts)
            if not repo.advance(
                run.id,
                run.lease_token,
                phase=page.phase,
                cursor=page.cursor,
                counts=counts,
                locked_until=now + self._lease,
                now=now,
            ):
                raise Fenced(f"reconciliation run {run.id} was taken over")
            uow.commit()
        return _reread(self._uow, run.id)

    def _finish(self, run: Run) -> Run:
        """The trial balance, in the run's last transaction: every currency's sum over the
        whole ledger (``ledger_sums``), and each of the account's payments whose lines do
        not sum to zero in a currency, a ``ledger_imbalance`` finding."""
        with self._uow() as uow:
            now = uow.now()
            repo = uow.reconciliation
            sums = repo.ledger_sums()
            imbalances = [
                ledger_imbalance(payment_id, currency, total)
                for payment_id, currency, total in repo.unbalanced_payments(
                    self._account.account_id
                )
            ]
            new, seen = repo.record(run.id, imbalances, run.connector_account, now)
            if not repo.finish(
                run.id,
                run.lease_token,
                status=RunStatus.COMPLETED,
                ledger_sums=sums,
                # Two payments out by opposite sums leave the currency's sum at zero.
                ledger_balanced=ledger_balanced(sums) and not imbalances,
                error=None,
                now=now,
                counts=RunCounts(findings_new=new, findings_seen=seen),
            ):
                raise Fenced(f"reconciliation run {run.id} was taken over")
            uow.commit()
        finished = _reread(self._uow, run.id)
        log.info(
            "reconciliation_completed",
            run=finished.id,
            connector_account=finished.connector_account,
            **finished.counts.document(),
        )
        return finished

    def _release(self, run: Run) -> Run:
        """Leave the run resumable at once (its lease ends now), at its committed page."""
        with self._uow() as uow:
            now = uow.now()
            uow.reconciliation.advance(
                run.id,
                run.lease_token,
                phase=run.phase,
                cursor=run.cursor,
                counts=RunCounts(),
                locked_until=now,
                now=now,
            )
            uow.commit()
        return _reread(self._uow, run.id)


def _reread(uow_factory: UnitOfWorkFactory, run_id: str) -> Run:
    with uow_factory() as uow:
        return _get(uow, run_id)


def _get(uow: UnitOfWork, run_id: str) -> Run:
    run = uow.reconciliation.get_run(run_id)
    assert run is not None, run_id
    return run
