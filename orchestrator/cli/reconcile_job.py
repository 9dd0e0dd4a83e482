"""The sweeper's scheduled reconciliation (``PAYORCH_RECONCILE_EVERY_SECONDS``): the same
runs as ``payorch reconcile`` with its default window (the two days before the last full
hour), from a thread of the sweeper process.

Due is decided from the database (the last completed run, whichever host ran it), so a
restart does not rerun it and several sweepers do not each run one per period; two that
start one at the same moment meet on the run's lease (one resumes or waits, decision 0093).
"""

from __future__ import annotations

import threading
from datetime import UTC, timedelta

from orchestrator.bootstrap import Container
from orchestrator.cli.reconcile import TargetOutcome, default_owner, run_targets, window_of
from orchestrator.logging import get_logger

log = get_logger(__name__)

# How often the thread asks whether a run is due (and how long after the sweeper starts it
# first asks).  Too long delays the first run after a deploy; each check is one read.
CHECK_SECONDS = 300.0


def reconcile_if_due(container: Container, *, owner: str) -> list[TargetOutcome] | None:
    """Run every account's reconciliation when the last completed run is older than
    ``reconcile_every_seconds`` (or there is none); None: not due (or disabled)."""
    every = container.settings.reconcile_every_seconds
    if every <= 0:
        return None
    with container.read_only_uow() as uow:
        now = uow.now()
        last = uow.reconciliation.last_completed_run()
    finished = last.finished_at if last is not None else None
    if finished is not None and now - finished < timedelta(seconds=every):
        return None
    outcomes = run_targets(container, None, window_of(None, None, now.astimezone(UTC)), owner=owner)
    for outcome in outcomes:
        log.info(
            "reconciliation_scheduled",
            connector_account=outcome.account,
            run=outcome.view.run.id if outcome.view else None,
            open_findings=outcome.open_findings,
            note=outcome.note or None,
        )
    return outcomes


def start_reconcile_job(container: Container, stop: threading.Event) -> threading.Thread | None:
    """The scheduled job's thread (None: ``reconcile_every_seconds`` is 0)."""
    if container.settings.reconcile_every_seconds <= 0:
        return None
    owner = default_owner()

    def loop() -> None:
        # The first check waits one period too: a sweeper restarted in a crash loop (or
        # one started for a minute by a test) never sends a burst of list calls.
        while not stop.wait(min(CHECK_SECONDS, container.settings.reconcile_every_seconds)):
            try:
                reconcile_if_due(container, owner=owner)
            except Exception as error:
                # The sweeper's own work goes on; the next check tries again.
                log.warning("reconciliation_scheduled_failed", error=type(error).__name__)

    thread = threading.Thread(target=loop, name="reconcile-job", daemon=True)
    thread.start()
    return thread
