"""Reconciliation runs, findings and a run's matches (migration 0027; decisions 0092, 0093).

Every write to a run after its claim is guarded by its lease token (``advance``, ``finish``:
``WHERE id = … AND lease_token = …``): a process that lost the run to another (its lease ran
out while it was stalled) writes nothing and learns so (``False``).  Findings are inserted on
their identity (kind, connector account, provider object) with ON CONFLICT DO NOTHING and
seen again by moving ``last_run_id``; resolution columns are written only by ``resolve``,
from open to resolved, never back.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import (
    ledger_lines,
    operations,
    payments,
    reconciliation_findings,
    reconciliation_matches,
    reconciliation_runs,
)
from orchestrator.domain.reconciliation import (
    COUNT_NAMES,
    Discrepancy,
    FindingKind,
    OurPayment,
    OurRefund,
    Phase,
    RunCounts,
    RunStatus,
)
from orchestrator.domain.reconciliation_records import (
    FINDING_ID_PREFIX,
    RUN_ID_PREFIX,
    Finding,
    Run,
)

r = reconciliation_runs.c
f = reconciliation_findings.c
m = reconciliation_matches.c
p = payments.c
o = operations.c
# A run's counts by column (``foreign`` is an SQL keyword: its column is foreign_objects).
_COUNT_COLUMNS = {name: ("foreign_objects" if name == "foreign" else name) for name in COUNT_NAMES}
# Runs an ops read lists at most, newest first.
MAX_RUNS_LISTED = 100
# Findings one run's read returns at most (a run with more says so: ``findings_truncated``).
MAX_FINDINGS_LISTED = 1000
# Payments out of balance one run names as findings at most: bounds the run's last
# transaction should the books be broken wholesale (each is a bug to report, not a queue).
MAX_UNBALANCED_NAMED = 100


def new_run_id() -> str:
    return f"{RUN_ID_PREFIX}{secrets.token_hex(12)}"


def new_finding_id() -> str:
    return f"{FINDING_ID_PREFIX}{secrets.token_hex(12)}"


def to_run(row: Row) -> Run:
    return Run(
        id=row["id"],
        connector_account=row["connector_account"],
        provider=row["provider"],
        window_start=row["window_start"],
        window_end=row["window_end"],
        status=RunStatus(row["status"]),
        phase=Phase(row["phase"]),
        cursor=row["cursor"],
        lease_token=int(row["lease_token"]),
        counts=RunCounts(**{name: int(row[col]) for name, col in _COUNT_COLUMNS.items()}),
        ledger_balanced=row["ledger_balanced"],
        ledger_sums=row["ledger_sums"],
        error=row["error"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def to_finding(row: Row) -> Finding:
    return Finding(
        id=row["id"],
        kind=FindingKind(row["kind"]),
        connector_account=row["connector_account"],
        provider_object_id=row["provider_object_id"],
        object_type=row["object_type"],
        payment_id=row["payment_id"],
        operation_id=row["operation_id"],
        ours=row["ours"],
        theirs=row["theirs"],
        first_run_id=row["first_run_id"],
        last_run_id=row["last_run_id"],
        resolution=row["resolution"],
        resolved_reason=row["resolved_reason"],
        resolved_by=row["resolved_by"],
        resolved_by_name=row["resolved_by_name"],
        resolved_at=row["resolved_at"],
        created_at=row["created_at"],
    )


def _to_our_payment(row: Row) -> OurPayment:
    return OurPayment(
        id=row["id"],
        status=row["status"],
        amount=int(row["amount"]),
        currency=row["currency"],
        provider_payment_id=row["provider_payment_id"],
        amount_captured=int(row["amount_captured"]),
    )


def _to_our_refund(row: Row) -> OurRefund:
    return OurRefund(
        id=row["id"],
        payment_id=row["payment_id"],
        status=row["status"],
        amount=None if row["amount"] is None else int(row["amount"]),
        currency=row["currency"],
        provider_object_id=row["provider_object_id"],
    )


_OUR_PAYMENT_COLUMNS = (
    p.id,
    p.status,
    p.amount,
    p.currency,
    p.provider_payment_id,
    p.amount_captured,
)
_OUR_REFUND_COLUMNS = (o.id, o.payment_id, o.status, o.amount, o.currency, o.provider_object_id)


def _of_account(account_id: str | None) -> sa.ColumnElement[bool]:
    """Our payments on a connector account (None: the platform's own)."""
    if account_id is None:
        return p.connector_account_id.is_(None)
    return p.connector_account_id == account_id


class ReconciliationRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def _insert(self) -> Any:
        return postgresql.insert if self._db.dialect == "postgresql" else sqlite.insert

    # -- runs ---------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        connector_account: str,
        provider: str,
        window_start: datetime,
        window_end: datetime,
        owner: str,
        locked_until: datetime,
        now: datetime,
    ) -> Run:
        """A new run, claimed by ``owner`` (lease token 1)."""
        row = self._db.one(
            reconciliation_runs.insert()
            .values(
                id=new_run_id(),
                connector_account=connector_account,
                provider=provider,
                window_start=window_start,
                window_end=window_end,
                status=RunStatus.RUNNING.value,
                phase=Phase.PAYMENTS.value,
                cursor=None,
                lease_token=1,
                lease_owner=owner,
                locked_until=locked_until,
                started_at=now,
                updated_at=now,
            )
            .returning(*reconciliation_runs.c)
        )
        assert row is not None
        return to_run(row)

    def get_run(self, run_id: str) -> Run | None:
        row = self._db.one(sa.select(reconciliation_runs).where(r.id == run_id))
        return None if row is None else to_run(row)

    def unfinished_run(
        self, connector_account: str, window_start: datetime, window_end: datetime
    ) -> Run | None:
        """The newest run of this account and window still running (one interrupted, or one
        another process holds), to resume rather than start again."""
        row = self._db.one(
            sa.select(reconciliation_runs)
            .where(
                r.connector_account == connector_account,
                r.window_start == window_start,
                r.window_end == window_end,
                r.status == RunStatus.RUNNING.value,
            )
            .order_by(r.started_at.desc())
            .limit(1)
        )
        return None if row is None else to_run(row)

    def take_over(
        self, run_id: str, *, owner: str, locked_until: datetime, now: datetime
    ) -> Run | None:
        """Claim a running run whose lease ran out (a new token); None: another process holds
        it, or it finished."""
        row = self._db.one(
            reconciliation_runs.update()
            .where(
                r.id == run_id,
                r.status == RunStatus.RUNNING.value,
                sa.or_(r.locked_until.is_(None), r.locked_until <= now),
            )
            .values(
                lease_token=r.lease_token + 1,
                lease_owner=owner,
                locked_until=locked_until,
                updated_at=now,
            )
            .returning(*reconciliation_runs.c)
        )
        return None if row is None else to_run(row)

    def advance(
        self,
        run_id: str,
        token: int,
        *,
        phase: Phase,
        cursor: str | None,
        counts: RunCounts,
        locked_until: datetime,
        now: datetime,
    ) -> bool:
        """Move the run's recovery point and add a page's counts; False: fenced."""
        added = {
            column: r[column] + getattr(counts, name) for name, column in _COUNT_COLUMNS.items()
        }
        done = self._db.execute(
            reconciliation_runs.update()
            .where(r.id == run_id, r.lease_token == token, r.status == RunStatus.RUNNING.value)
            .values(
                phase=phase.value,
                cursor=cursor,
                locked_until=locked_until,
                updated_at=now,
                **added,
            )
        )
        return done == 1

    def finish(
        self,
        run_id: str,
        token: int,
        *,
        status: RunStatus,
        ledger_sums: dict[str, int] | None,
        ledger_balanced: bool | None,
        error: str | None,
        now: datetime,
        counts: RunCounts | None = None,
    ) -> bool:
        """End the run (guarded by its lease token; False: fenced), adding ``counts`` (the
        findings of its last step, the trial balance)."""
        added = {
            column: r[column] + getattr(counts, name)
            for name, column in _COUNT_COLUMNS.items()
            if counts is not None
        }
        done = self._db.execute(
            reconciliation_runs.update()
            .where(r.id == run_id, r.lease_token == token, r.status == RunStatus.RUNNING.value)
            .values(
                **added,
                status=status.value,
                phase=Phase.DONE.value if status is RunStatus.COMPLETED else r.phase,
                ledger_sums=ledger_sums,
                ledger_balanced=ledger_balanced,
                error=error,
                lease_owner=None,
                locked_until=None,
                finished_at=now,
                updated_at=now,
            )
        )
        if done == 1:
            self._db.write(reconciliation_matches.delete().where(m.run_id == run_id))
        return done == 1

    def runs(self, *, limit: int = MAX_RUNS_LISTED) -> list[Run]:
        rows = self._db.all(
            sa.select(reconciliation_runs)
            .order_by(r.started_at.desc(), r.id.desc())
            .limit(min(limit, MAX_RUNS_LISTED))
        )
        return [to_run(row) for row in rows]

    def last_completed_run(self) -> Run | None:
        row = self._db.one(
            sa.select(reconciliation_runs)
            .where(r.status == RunStatus.COMPLETED.value)
            .order_by(r.finished_at.desc())
            .limit(1)
        )
        return None if row is None else to_run(row)

    # -- findings -----------------------------------------------------------------------------

    def record(
        self,
        run_id: str,
        discrepancies: Sequence[Discrepancy],
        connector_account: str,
        now: datetime,
    ) -> tuple[int, int]:
        """Store a page's discrepancies: new ones inserted, known ones (open or resolved) seen
        again by this run.  Returns (new, seen again)."""
        if not discrepancies:
            return 0, 0
        inserted = 0
        for found in discrepancies:
            row = self._db.one(
                self._insert()(reconciliation_findings)
                .values(
                    id=new_finding_id(),
                    kind=found.kind.value,
                    connector_account=connector_account,
                    provider_object_id=found.provider_object_id,
                    object_type=found.object_type,
                    payment_id=found.payment_id,
                    operation_id=found.operation_id,
                    ours=found.ours.document() if found.ours else None,
                    theirs=found.theirs.document() if found.theirs else None,
                    first_run_id=run_id,
                    last_run_id=run_id,
                    resolution="open",
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(
                    index_elements=["kind", "connector_account", "provider_object_id"]
                )
                .returning(f.id)
            )
            if row is not None:
                inserted += 1
                continue
            # Known: this run saw it too.  Its resolution is left as it is.
            self._db.write(
                reconciliation_findings.update()
                .where(
                    f.kind == found.kind.value,
                    f.connector_account == connector_account,
                    f.provider_object_id == found.provider_object_id,
                )
                .values(last_run_id=run_id, updated_at=now)
            )
        return inserted, len(discrepancies) - inserted

    def findings_of_run(self, run_id: str, *, limit: int = MAX_FINDINGS_LISTED) -> list[Finding]:
        rows = self._db.all(
            sa.select(reconciliation_findings)
            .where(f.last_run_id == run_id)
            .order_by(f.kind, f.provider_object_id)
            .limit(limit)
        )
        return [to_finding(row) for row in rows]

    def get_finding(self, finding_id: str) -> Finding | None:
        row = self._db.one(sa.select(reconciliation_findings).where(f.id == finding_id))
        return None if row is None else to_finding(row)

    def resolve(
        self, finding_id: str, *, reason: str, by: str, by_name: str, now: datetime
    ) -> Finding | None:
        """Open -> resolved, once (compare-and-set); None: not open (or no such finding)."""
        row = self._db.one(
            reconciliation_findings.update()
            .where(f.id == finding_id, f.resolution == "open")
            .values(
                resolution="resolved",
                resolved_reason=reason,
                resolved_by=by,
                resolved_by_name=by_name,
                resolved_at=now,
                updated_at=now,
            )
            .returning(*reconciliation_findings.c)
        )
        return None if row is None else to_finding(row)

    def open_counts_by_kind(self) -> dict[str, int]:
        rows = self._db.all(
            sa.select(f.kind, sa.func.count().label("n"))
            .where(f.resolution == "open")
            .group_by(f.kind)
        )
        return {row["kind"]: int(row["n"]) for row in rows}

    # -- our side -----------------------------------------------------------------------------

    def payments_by_id(self, ids: Iterable[str]) -> dict[str, OurPayment]:
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        rows = self._db.all(sa.select(*_OUR_PAYMENT_COLUMNS).where(p.id.in_(wanted)))
        return {row["id"]: _to_our_payment(row) for row in rows}

    def payments_by_provider_id(
        self, provider_ids: Iterable[str], account_id: str | None
    ) -> dict[str, OurPayment]:
        wanted = sorted(set(provider_ids))
        if not wanted:
            return {}
        rows = self._db.all(
            sa.select(*_OUR_PAYMENT_COLUMNS).where(
                p.provider_payment_id.in_(wanted), _of_account(account_id)
            )
        )
        return {row["provider_payment_id"]: _to_our_payment(row) for row in rows}

    def payments_by_charge_id(
        self, charge_ids: Iterable[str], account_id: str | None
    ) -> dict[str, OurPayment]:
        """Ours of the account by the provider charge that moved their money (decision 0108)."""
        wanted = sorted(set(charge_ids))
        if not wanted:
            return {}
        rows = self._db.all(
            sa.select(p.provider_charge_id, *_OUR_PAYMENT_COLUMNS).where(
                p.provider_charge_id.in_(wanted), _of_account(account_id)
            )
        )
        return {row["provider_charge_id"]: _to_our_payment(row) for row in rows}

    def refunds_by_provider_id(self, provider_ids: Iterable[str]) -> dict[str, OurRefund]:
        wanted = sorted(set(provider_ids))
        if not wanted:
            return {}
        rows = self._db.all(
            sa.select(*_OUR_REFUND_COLUMNS).where(
                o.kind == "refund", o.provider_object_id.in_(wanted)
            )
        )
        return {row["provider_object_id"]: _to_our_refund(row) for row in rows}

    def refunds_by_id(self, ids: Iterable[str]) -> dict[str, OurRefund]:
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        rows = self._db.all(
            sa.select(*_OUR_REFUND_COLUMNS).where(o.kind == "refund", o.id.in_(wanted))
        )
        return {row["id"]: _to_our_refund(row) for row in rows}

    def add_matches(self, run_id: str, our_ids: Iterable[str]) -> None:
        ids = sorted(set(our_ids))
        if ids:
            self._db.write(
                self._insert()(reconciliation_matches)
                .values([{"run_id": run_id, "our_id": our_id} for our_id in ids])
                .on_conflict_do_nothing()
            )

    def unmatched_payments(
        self,
        run_id: str,
        account_id: str | None,
        *,
        created_from: datetime,
        created_to: datetime,
        after_id: str | None,
        limit: int,
    ) -> list[OurPayment]:
        """Ours on the account, created in the window, that moved money, and that this run did
        not see at the provider: by id, after ``after_id`` (the run's cursor in this phase)."""
        matched = sa.select(m.our_id).where(m.run_id == run_id, m.our_id == p.id)
        query = (
            sa.select(*_OUR_PAYMENT_COLUMNS)
            .where(
                _of_account(account_id),
                p.created_at >= created_from,
                p.created_at <= created_to,
                p.status.in_(("succeeded", "requires_capture")),
                ~matched.exists(),
            )
            .order_by(p.id)
            .limit(limit)
        )
        if after_id is not None:
            query = query.where(p.id > after_id)
        return [_to_our_payment(row) for row in self._db.all(query)]

    def unmatched_refunds(
        self,
        run_id: str,
        account_id: str | None,
        *,
        created_from: datetime,
        created_to: datetime,
        after_id: str | None,
        limit: int,
    ) -> list[OurRefund]:
        """Our succeeded refunds of the account's payments, created in the window, that this
        run did not see at the provider."""
        matched = sa.select(m.our_id).where(m.run_id == run_id, m.our_id == o.id)
        query = (
            sa.select(*_OUR_REFUND_COLUMNS)
            .select_from(operations.join(payments, p.id == o.payment_id))
            .where(
                o.kind == "refund",
                o.status == "succeeded",
                _of_account(account_id),
                o.created_at >= created_from,
                o.created_at <= created_to,
                ~matched.exists(),
            )
            .order_by(o.id)
            .limit(limit)
        )
        if after_id is not None:
            query = query.where(o.id > after_id)
        return [_to_our_refund(row) for row in self._db.all(query)]

    # -- the ledger ---------------------------------------------------------------------------

    def unbalanced_payments(
        self, account_id: str | None, *, limit: int = MAX_UNBALANCED_NAMED
    ) -> list[tuple[str, str, int]]:
        """The account's payments whose ledger lines do not sum to zero, per currency:
        (payment id, currency, sum), at most ``limit`` (the run's ``ledger_sums`` still
        shows a currency out of balance however many there are)."""
        total = sa.func.sum(ledger_lines.c.amount)
        rows = self._db.all(
            sa.select(ledger_lines.c.payment_id, ledger_lines.c.currency, total.label("total"))
            .select_from(ledger_lines.join(payments, p.id == ledger_lines.c.payment_id))
            .where(_of_account(account_id))
            .group_by(ledger_lines.c.payment_id, ledger_lines.c.currency)
            .having(total != 0)
            .order_by(ledger_lines.c.payment_id, ledger_lines.c.currency)
            .limit(limit)
        )
        return [(row["payment_id"], row["currency"], int(row["total"])) for row in rows]

    def ledger_sums(self) -> dict[str, int]:
        """Every currency's ledger lines summed: double entry makes each zero."""
        rows = self._db.all(
            sa.select(
                ledger_lines.c.currency, sa.func.sum(ledger_lines.c.amount).label("total")
            ).group_by(ledger_lines.c.currency)
        )
        return {row["currency"]: int(row["total"] or 0) for row in rows}
