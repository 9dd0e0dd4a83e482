"""Connector accounts: a merchant's accounts at its providers, and the merchant's default.

Changes are compare-and-set on ``version`` (the account's ETag), so an ``If-Match`` that
lost a race changes nothing.  ``refresh_default`` recomputes the client's
``default_connector_account_id`` (its oldest enabled account, else NULL: the platform's
own account) in the caller's transaction, after every create or disable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import api_clients, connector_accounts, payments
from orchestrator.domain.connector_accounts import AccountStatus, ConnectorAccount

c = connector_accounts.c
# A merchant has a handful of accounts; the cap bounds a list all the same.
MAX_ACCOUNTS_LISTED = 200


def to_account(m: Row) -> ConnectorAccount:
    return ConnectorAccount(
        id=m["id"],
        client_id=m["client_id"],
        provider=m["provider"],
        name=m["name"],
        credentials_encrypted=m["credentials_encrypted"],
        credential_hints=dict(m["credential_hints"] or {}),
        status=AccountStatus(m["status"]),
        disabled_reason=m["disabled_reason"],
        version=m["version"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


class ConnectorAccountRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def add(
        self,
        *,
        account_id: str,
        client_id: str,
        provider: str,
        name: str,
        credentials_encrypted: str,
        credential_hints: dict[str, str],
        now: datetime,
    ) -> ConnectorAccount:
        row = self._db.one(
            connector_accounts.insert()
            .values(
                id=account_id,
                client_id=client_id,
                provider=provider,
                name=name,
                credentials_encrypted=credentials_encrypted,
                credential_hints=credential_hints,
                status=AccountStatus.ENABLED.value,
                version=1,
                created_at=now,
                updated_at=now,
            )
            .returning(*connector_accounts.c)
        )
        assert row is not None, "INSERT … RETURNING returns its row"
        return to_account(row)

    def get(self, account_id: str, *, client_id: str | None = None) -> ConnectorAccount | None:
        """An account; scoped to ``client_id`` when given (another client's is None)."""
        query = sa.select(connector_accounts).where(c.id == account_id)
        if client_id is not None:
            query = query.where(c.client_id == client_id)
        row = self._db.one(query)
        return None if row is None else to_account(row)

    def list_for_client(self, client_id: str) -> list[ConnectorAccount]:
        rows = self._db.all(
            sa.select(connector_accounts)
            .where(c.client_id == client_id)
            .order_by(c.created_at, c.id)
            .limit(MAX_ACCOUNTS_LISTED)
        )
        return [to_account(r) for r in rows]

    def list_all(
        self, *, client_id: str | None = None, limit: int = MAX_ACCOUNTS_LISTED
    ) -> list[ConnectorAccount]:
        """Every merchant's accounts (ops), optionally one merchant's, oldest first."""
        query = sa.select(connector_accounts).order_by(c.client_id, c.created_at, c.id)
        if client_id is not None:
            query = query.where(c.client_id == client_id)
        return [to_account(r) for r in self._db.all(query.limit(limit))]

    def update(
        self, account_id: str, *, expected_version: int, now: datetime, **values: Any
    ) -> ConnectorAccount | None:
        """Compare-and-set on ``version``; None when it moved."""
        row = self._db.one(
            connector_accounts.update()
            .where(c.id == account_id, c.version == expected_version)
            .values(version=c.version + 1, updated_at=now, **values)
            .returning(*connector_accounts.c)
        )
        return None if row is None else to_account(row)

    def refresh_default(self, client_id: str) -> str | None:
        """Set the client's default account to its oldest enabled one (NULL: none, the
        platform's Stripe account) and return it.

        Hazard: two transactions adding accounts for one merchant at once would each
        compute the oldest from a snapshot without the other's row (READ COMMITTED takes
        the UPDATE's snapshot when it starts, before it waits for the row lock), and the
        last to commit could name the newer account.  Locking the client's row in a
        statement of its own first (FOR NO KEY UPDATE: the inserted accounts' foreign keys
        hold KEY SHARE locks on it, which a FOR UPDATE would deadlock with) makes the
        UPDATE's snapshot include the other's row."""
        self._db.execute(
            sa.select(api_clients.c.id)
            .where(api_clients.c.id == client_id)
            .with_for_update(key_share=True)
        )
        oldest = (
            sa.select(c.id)
            .where(c.client_id == client_id, c.status == AccountStatus.ENABLED.value)
            .order_by(c.created_at, c.id)
            .limit(1)
            .scalar_subquery()
        )
        self._db.execute(
            api_clients.update()
            .where(api_clients.c.id == client_id)
            .values(default_connector_account_id=oldest)
        )
        return self.default_for(client_id)

    def default_for(self, client_id: str) -> str | None:
        value = self._db.scalar(
            sa.select(api_clients.c.default_connector_account_id).where(
                api_clients.c.id == client_id
            )
        )
        return None if value is None else str(value)

    def account_of_payment(self, payment_id: str) -> str | None:
        """The connector account a payment runs on (its refunds, captures and cancels use
        it too); None: the platform's Stripe account."""
        value = self._db.scalar(
            sa.select(payments.c.connector_account_id).where(payments.c.id == payment_id)
        )
        return None if value is None else str(value)
