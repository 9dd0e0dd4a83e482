"""``payorch reconcile``: compare what the providers say with payorch's rows (decisions
0092, 0093), store a run per connector account with its findings, print a summary.

Exit status: 0 every run is clean (no open finding), 1 a run has open findings, 69 a
provider could not be read (its run stays resumable: run the same command again), 2 the
options are wrong.  ``--since``/``--until`` are ISO 8601 with a zone; the window selects
provider objects by their creation time.  By default it ends at the last full hour and
starts two days before, so a rerun within the hour is the same window (it resumes an
interrupted run, or adds no finding to a finished one).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from orchestrator.bootstrap import Container, ReconcileTarget, UnknownConnectorAccount, bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import console, errors, print_json
from orchestrator.domain.instants import OUT_OF_RANGE, in_utc
from orchestrator.engine.lease import Fenced
from orchestrator.engine.publisher import NullPublisher
from orchestrator.engine.reconcile import RunBusy, SourceUnavailable, Window
from orchestrator.ops.reconciliation import RunView, read_run, run_document

EXIT_FINDINGS = 1
EXIT_USAGE = 2
EX_UNAVAILABLE = 69  # sysexits.h: a provider could not be read
DEFAULT_WINDOW = timedelta(days=2)


def _instant(option: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        errors.print(f"{option}: {value!r} is not ISO 8601 (e.g. 2026-12-01T00:00:00Z)")
        raise typer.Exit(EXIT_USAGE) from None
    if parsed.tzinfo is None:
        errors.print(f"{option}: give a zone (e.g. {value}Z or {value}+01:00)")
        raise typer.Exit(EXIT_USAGE)
    utc = in_utc(parsed)
    if utc is None:
        errors.print(f"{option}: {value!r} is out of range: {OUT_OF_RANGE}")
        raise typer.Exit(EXIT_USAGE)
    return utc


def window_of(since: datetime | None, until: datetime | None, now: datetime) -> Window:
    end = until or now.replace(minute=0, second=0, microsecond=0)
    start = since or end - DEFAULT_WINDOW
    return Window(start, end)


def reconcile(
    connector: Annotated[
        str | None,
        typer.Option(
            "--connector",
            help="One connector account (ca_…; ca_platform_stripe: the platform's). "
            "Default: the platform's and every enabled one.",
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="ISO 8601 with a zone. Default: until - 2 days.")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="ISO 8601 with a zone. Default: the last full hour."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON.")] = False,
) -> None:
    """Reconcile provider objects created in a window against payorch's rows."""
    start = _instant("--since", since)
    end = _instant("--until", until)
    window = window_of(start, end, datetime.now(UTC))
    if window.start >= window.end:
        errors.print("--since must be before --until")
        raise typer.Exit(EXIT_USAGE)
    container = bootstrap(load_settings(), publisher=NullPublisher())
    try:
        code = _run_all(container, connector, window, as_json=as_json)
    finally:
        container.close()
    raise typer.Exit(code)


@dataclass(frozen=True)
class TargetOutcome:
    """What reconciling one account came to: its run (with findings), or why it has none."""

    account: str
    view: RunView | None = None
    note: str = ""
    unreachable: bool = False

    @property
    def open_findings(self) -> int:
        return 0 if self.view is None else sum(1 for f in self.view.findings if f.open)


def run_targets(
    container: Container, connector: str | None, window: Window, *, owner: str
) -> list[TargetOutcome]:
    """Reconcile each account of ``container.reconciliation_targets(connector)`` over
    ``window``, one after the other (``UnknownConnectorAccount`` for an unknown one)."""
    outcomes: list[TargetOutcome] = []
    targets = container.reconciliation_targets(connector)
    try:
        for target in targets:
            outcomes.append(_run_target(container, target, window, owner=owner))
    finally:
        for target in targets:
            if target.source is not None:
                target.source.close()
    return outcomes


def _run_target(
    container: Container, target: ReconcileTarget, window: Window, *, owner: str
) -> TargetOutcome:
    key = target.account.key
    if target.source is None:
        return TargetOutcome(key, note=f"skipped: {target.skipped}")
    try:
        run = container.reconciler(target, owner=owner).run(window)
    except SourceUnavailable as error:
        note = f"unreachable ({error.error}); resumable: {error.run.id}"
        return TargetOutcome(key, note=note, unreachable=True)
    except RunBusy as error:
        return TargetOutcome(key, note=f"busy: held elsewhere ({error.run.id})")
    except Fenced:
        # Another process took the run over (this one stalled past its lease).
        return TargetOutcome(key, note="taken over by another process")
    with container.read_only_uow() as uow:
        view = read_run(uow, run.id)
    assert view is not None
    return TargetOutcome(key, view=view)


def default_owner() -> str:
    return f"reconcile@{socket.gethostname()}:{os.getpid()}"


def _run_all(container: Container, connector: str | None, window: Window, *, as_json: bool) -> int:
    try:
        outcomes = run_targets(container, connector, window, owner=default_owner())
    except UnknownConnectorAccount as error:
        errors.print(f"--connector: {error}")
        return EXIT_USAGE
    code = 0
    for outcome in outcomes:
        if outcome.unreachable:
            errors.print(f"{outcome.account}: the provider could not be read; run again")
            code = EX_UNAVAILABLE
        elif outcome.open_findings and code == 0:
            code = EXIT_FINDINGS
    if as_json:
        print_json(
            {
                "window": {"since": window.start, "until": window.end},
                "runs": [run_document(o.view) for o in outcomes if o.view is not None],
                "skipped": {o.account: o.note for o in outcomes if o.view is None},
            }
        )
    else:
        _print_summary(window, outcomes)
    return code


def _print_summary(window: Window, outcomes: list[TargetOutcome]) -> None:
    """One row per account, then each account's run id or why it has none: fits 80
    columns with whole ids (an id cut short cannot be copied)."""
    from rich.table import Table

    table = Table(
        title=f"reconcile {window.start:%Y-%m-%d %H:%M} → {window.end:%Y-%m-%d %H:%M} UTC"
    )
    table.add_column("account", no_wrap=True)
    for column in ("pi/re", "foreign", "open", "new", "ledger"):
        table.add_column(column, no_wrap=True)
    lines: list[str] = []
    for outcome in outcomes:
        if outcome.view is None:
            table.add_row(outcome.account, "-", "-", "-", "-", "-")
            lines.append(f"{outcome.account}: {outcome.note}")
            continue
        run = outcome.view.run
        counts = run.counts
        ledger = {True: "ok", False: "UNBALANCED", None: "-"}[run.ledger_balanced]
        table.add_row(
            run.connector_account,
            f"{counts.payments_seen}/{counts.refunds_seen}",
            str(counts.foreign),
            str(outcome.open_findings),
            str(counts.findings_new),
            ledger,
        )
        lines.append(f"{run.connector_account}: run {run.id}")
    console.print(table)
    for line in lines:
        console.print(line, highlight=False, markup=False)
