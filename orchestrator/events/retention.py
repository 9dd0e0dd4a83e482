"""Retention of events, deliveries and attempts (the sweeper's retention pass runs it: the
composition root hands it to the ``Sweeper``, so the engine never imports the relay's code).

Events written more than ``PAYORCH_WEBHOOK_EVENT_RETENTION_DAYS`` (default 30, Stripe's
``/v1/events`` horizon) ago whose deliveries are all finished (delivered, or given up) are
deleted with their deliveries and attempts, in batches of ``RETENTION_BATCH_SIZE``, each
batch its own short transaction.  A payment's newest event stays (only its deliveries and
attempts go): the next event's ``sequence`` continues from it.  A delivery pending to an
enabled endpoint keeps its event, however old; one waiting for a disabled or deleted
endpoint does not keep it forever.
"""

from __future__ import annotations

from datetime import timedelta

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.settings import Settings


def purge_delivered_events(uow_factory: UnitOfWorkFactory, settings: Settings) -> int:
    window = timedelta(days=settings.webhook_event_retention_days)
    purged = 0
    while True:
        with uow_factory() as uow:
            now = uow.now()
            count = uow.deliveries.purge_events(
                cutoff=now - window, limit=settings.retention_batch_size
            )
            uow.commit()
        purged += count
        if count < settings.retention_batch_size:
            return purged
