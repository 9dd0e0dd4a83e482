"""What operators do with connector accounts: list every merchant's, disable one (audited).

The ops API, the console and the CLI call these (one implementation).  A disable is one
transaction: the account's status, the merchant's default account recomputed, and the
audit row (its ``payment_id`` column names the account: the audit trail's subject).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.connector_accounts import (
    AccountStatus,
    ConnectorAccount,
    is_connector_account_id,
)
from orchestrator.domain.model import AuditEntry
from orchestrator.engine.takeover import Actor
from orchestrator.ops.errors import ConcurrentChange, clean_reason

DISABLE_ACTION = "disable_connector_account"


class AccountNotFound(LookupError):
    pass


@dataclass(frozen=True)
class AccountDisabled:
    account: ConnectorAccount
    # None: it was disabled already (nothing changed, nothing audited).
    audit: AuditEntry | None


def list_accounts(
    uow: UnitOfWorkFactory, *, client_id: str | None = None
) -> list[ConnectorAccount]:
    """Every merchant's accounts (or one merchant's), oldest first per merchant."""
    with uow() as unit:
        return unit.connector_accounts.list_all(client_id=client_id)


def disable_account(
    uow: UnitOfWorkFactory, actor: Actor, account_id: str, *, reason: str
) -> AccountDisabled:
    """Disable any merchant's account with a reason (``InvalidReason`` without one); its
    payments in flight keep it, new ones cannot use it."""
    why = clean_reason(reason)
    if not is_connector_account_id(account_id):
        raise AccountNotFound(account_id)
    with uow() as unit:
        current = unit.connector_accounts.get(account_id)
        if current is None:
            raise AccountNotFound(account_id)
        if not current.enabled:
            return AccountDisabled(current, None)
        now = unit.now()
        updated = unit.connector_accounts.update(
            account_id,
            expected_version=current.version,
            now=now,
            status=AccountStatus.DISABLED.value,
            disabled_reason=f"disabled by an operator: {why}"[:1000],
        )
        if updated is None:
            raise ConcurrentChange("The account was changed concurrently; try again.")
        unit.connector_accounts.refresh_default(current.client_id)
        audit = unit.audit.add(
            actor_client_id=actor.client_id,
            actor_name=actor.name,
            action=DISABLE_ACTION,
            payment_id=account_id,
            reason=why,
            old_token=None,
            new_token=None,
            now=now,
        )
        unit.commit()
    return AccountDisabled(updated, audit)
