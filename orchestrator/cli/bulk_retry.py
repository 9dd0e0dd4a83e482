"""``payorch payments retry --status needs_attention [--since T] [--connector ca_…]
[--dry-run] --reason …``: the bulk form of ``payorch payments retry pay_…``
(``orchestrator.ops.bulk_retry``; decision 0088).

Output: with ``--dry-run`` a table of what would be retried, then one summary line; without
it, one summary line (and a table of the payments skipped, with why).  ``--json`` prints the
ops API's body instead.  Exit codes: 0 done (skips included: they are someone else's
change, not an error), 2 invalid input, 3 unknown connector account, 130 interrupted (what
was retried stays retried; the same command again retries the rest).
"""

from __future__ import annotations

from datetime import UTC, datetime

import typer
from rich.table import Table

from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.ops_output import fail
from orchestrator.cli.output import console, errors, print_json, print_table
from orchestrator.engine.takeover import Actor
from orchestrator.ops.bulk_retry import (
    BulkResult,
    BulkRetryItem,
    BulkRetrySummary,
    bulk_retry_filter,
    parse_since,
    run_bulk_retry,
)
from orchestrator.ops.bulk_retry_documents import bulk_retry_representation
from orchestrator.ops.errors import OpsError

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
_ERROR_WIDTH = 40  # last_error cut for the table; `payorch payments show` has it whole


def run_bulk_retry_command(
    actor: Actor,
    *,
    status: str,
    since: str | None,
    connector: str | None,
    reason: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    container = bootstrap(load_settings())
    items: list[BulkRetryItem] = []
    try:
        filters = bulk_retry_filter(
            container.uow,
            status=status.strip(),
            since=None if since is None else parse_since(since),
            connector=None if connector is None else connector.strip(),
        )
        summary = run_bulk_retry(
            container.uow,
            container.publisher,
            container.settings,
            actor,
            filters,
            reason=reason,
            dry_run=dry_run,
            on_item=items.append,
        )
    except OpsError as error:
        fail(error, as_json=as_json)
    except KeyboardInterrupt:
        # Every retry before this one committed whole; this one either committed (its
        # wake-up, if not sent, is the sweeper's) or rolled back and is still parked.
        done = sum(1 for i in items if i.result is BulkResult.RETRIED)
        errors.print(f"interrupted: {done} retried; run the same command again to retry the rest.")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if as_json:
        print_json(bulk_retry_representation(summary))
        return
    _print_summary(summary)


def _print_summary(summary: BulkRetrySummary) -> None:
    if summary.dry_run:
        if summary.items:
            _print_would_retry(summary.items)
        console.print(
            f"dry run: {summary.would_retry} parked payment(s) would be retried; nothing changed."
        )
        return
    skipped = [i for i in summary.items if i.result is BulkResult.SKIPPED]
    if skipped:
        print_table(
            "skipped (changed since listed; nothing written)",
            ["payment", "why"],
            [[i.payment_id, i.skip_reason] for i in skipped],
        )
    if not summary.items:
        console.print("No parked payment matches; nothing retried.")
        return
    reasons = ", ".join(f"{k} {v}" for k, v in summary.skipped.items() if v)
    line = f"retried {summary.retried} of {summary.matched} matched"
    console.print(line + (f"; skipped {len(skipped)} ({reasons})." if skipped else "."))
    if summary.not_published:
        console.print(
            f"{summary.not_published} wake-up(s) refused by the broker: the sweeper "
            "re-queues them when their dispatch lease expires."
        )


def _print_would_retry(items: list[BulkRetryItem]) -> None:
    # Ids whole on one line even at 80 columns (a folded id cannot be copied); the
    # connector is in --json, the last error folds into what width is left.
    table = Table(title="would retry (dry run)")
    table.add_column("payment", no_wrap=True, min_width=len(items[0].payment_id))
    table.add_column("parked at", no_wrap=True)
    table.add_column("last error", overflow="fold")
    for item in items:
        table.add_row(item.payment_id, _time(item.parked_at), _short(item.last_error))
    console.print(table)


def _time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _short(text: str | None) -> str:
    if not text:
        return ""
    return text if len(text) <= _ERROR_WIDTH else text[: _ERROR_WIDTH - 1] + "…"
