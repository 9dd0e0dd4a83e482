"""Move every stored secret to the current ``PAYORCH_SECRET_KEY`` (``payorch secrets
reencrypt``): the step between adding a new key and dropping the old one.

A rotation, as the runbook has it: the new key becomes ``PAYORCH_SECRET_KEY`` and the old
one moves to ``PAYORCH_PREVIOUS_SECRET_KEYS`` (every process restarted: they then seal with
the new key and open with both); this resealing runs; then the old key is dropped.

Each sealed column is read a page at a time in its own short transaction, and each value
that is not under the current key already is resealed compare-and-set
(``db.repositories.sealed_secrets``), so the command can run beside live traffic, be
interrupted, and be run again: a second run finds nothing to do.  A value that opens under no
key of the ring is counted and named, never guessed at; the command then fails, because
dropping the previous key would lose it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.db.repositories.sealed_secrets import SealedColumn
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.events.secret_box import SecretBox, UnreadableSecret
from orchestrator.services.connector_accounts import CREDENTIALS_PURPOSE

PAGE_SIZE = 200


@dataclass
class ColumnReport:
    column: SealedColumn
    resealed: int = 0
    current: int = 0
    # Changed by someone else between the read and the reseal (already current then).
    changed_meanwhile: int = 0
    unreadable: list[str] = field(default_factory=list)


def boxes(secret_keys: Sequence[str]) -> dict[SealedColumn, SecretBox]:
    """Each sealed column's box over the key ring (current first)."""
    endpoint = SecretBox(secret_keys)
    return {
        SealedColumn.ENDPOINT_SECRET: endpoint,
        SealedColumn.ENDPOINT_PREVIOUS_SECRET: endpoint,
        SealedColumn.CONNECTOR_CREDENTIALS: SecretBox(secret_keys, purpose=CREDENTIALS_PURPOSE),
    }


def reseal_all(
    uow: UnitOfWorkFactory, secret_keys: Sequence[str], *, dry_run: bool = False
) -> list[ColumnReport]:
    """Reseal every stored secret under ``secret_keys[0]``; ``dry_run`` only counts."""
    return [
        _reseal_column(uow, column, box, dry_run=dry_run)
        for column, box in boxes(secret_keys).items()
    ]


def _reseal_column(
    uow: UnitOfWorkFactory, column: SealedColumn, box: SecretBox, *, dry_run: bool
) -> ColumnReport:
    report = ColumnReport(column)
    after: str | None = None
    while True:
        with uow() as unit:
            page = unit.sealed_secrets.page(column, after=after, limit=PAGE_SIZE)
            for value in page:
                if box.is_current(value.sealed):
                    report.current += 1
                    continue
                try:
                    resealed = box.reseal(value.sealed)
                except UnreadableSecret:
                    report.unreadable.append(value.row_id)
                    continue
                if dry_run or unit.sealed_secrets.reseal(
                    column, value.row_id, was=value.sealed, now=resealed
                ):
                    report.resealed += 1
                else:
                    report.changed_meanwhile += 1
            if not dry_run:
                unit.commit()
        if len(page) < PAGE_SIZE:
            return report
        after = page[-1].row_id
