"""Connector accounts: the merchant's use cases (create, list, read, update, disable) and
the credentials' box.

Each call is one unit of work.  Credentials are validated per provider
(``providers.credentials.validate_credentials``) before anything is written, stored as
one Fernet token (``SecretBox`` under ``PAYORCH_SECRET_KEY`` with this module's purpose
label), and never answered: an account shows ``…last4`` per field.  Creating or disabling
an account recomputes the merchant's default account in the same transaction
(``refresh_default``), so the accept reads it with the client's row.

Accounts are never deleted: a disabled one still serves the refunds, captures and cancels
of the payments that ran on it; only new payments cannot use it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.connector_accounts import (
    AccountStatus,
    ConnectorAccount,
    credential_hints,
    is_connector_account_id,
    new_connector_account_id,
)
from orchestrator.domain.preconditions import TagList
from orchestrator.events.secret_box import SecretBox, UnreadableSecret
from orchestrator.providers.credentials import (
    PROVIDERS,
    InvalidCredentials,
    validate_credentials,
)

CREDENTIALS_PURPOSE = b"payorch connector account credentials v1"
MAX_NAME_LENGTH = 200


class AccountError(Exception):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class AccountNotFound(AccountError):
    pass


class InvalidAccount(AccountError):
    pass


class AccountPreconditionFailed(AccountError):
    pass


class AccountConflict(AccountError):
    pass


class UnreadableCredentials(AccountError):
    pass


def credentials_box(secret_keys: str | Sequence[str]) -> SecretBox:
    """The box of connector credentials: one root secret, or the ring (current first)."""
    return SecretBox(secret_keys, purpose=CREDENTIALS_PURPOSE)


def seal_credentials(box: SecretBox, credentials: dict[str, str]) -> str:
    return box.seal(json.dumps(credentials, sort_keys=True, separators=(",", ":")))


def open_credentials(box: SecretBox, account: ConnectorAccount) -> dict[str, str]:
    """The account's credentials; ``UnreadableCredentials`` when ``PAYORCH_SECRET_KEY``
    changed since they were stored (set them again with an update)."""
    try:
        opened = json.loads(box.open(account.credentials_encrypted))
    except UnreadableSecret:
        raise UnreadableCredentials(
            f"connector account {account.id}'s credentials do not decrypt with "
            "PAYORCH_SECRET_KEY or any of PAYORCH_PREVIOUS_SECRET_KEYS (was a key dropped?): "
            "set them again"
        ) from None
    return {str(k): str(v) for k, v in opened.items()}


def checked_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise InvalidAccount(f"name must be 1-{MAX_NAME_LENGTH} characters", field="name")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise InvalidAccount("name must not contain control characters", field="name")
    return name.strip()


def checked_credentials(provider: str, given: Any) -> dict[str, str]:
    try:
        return validate_credentials(provider, given)
    except InvalidCredentials as error:
        raise InvalidAccount(error.message, field=error.field) from None


def checked_provider(provider: Any) -> str:
    if provider not in PROVIDERS:
        known = ", ".join(PROVIDERS)
        raise InvalidAccount(f"provider must be one of: {known}", field="provider")
    return str(provider)


@dataclass(frozen=True)
class ConnectorAccountService:
    uow: UnitOfWorkFactory
    box: SecretBox

    def create(
        self, client_id: str, *, provider: Any, name: Any, credentials: Any
    ) -> ConnectorAccount:
        """Everything is checked before the unit of work opens: a refused request writes
        nothing."""
        chosen = checked_provider(provider)
        clean_name = checked_name(name)
        checked = checked_credentials(chosen, credentials)
        sealed = seal_credentials(self.box, checked)
        with self.uow() as uow:
            account = uow.connector_accounts.add(
                account_id=new_connector_account_id(),
                client_id=client_id,
                provider=chosen,
                name=clean_name,
                credentials_encrypted=sealed,
                credential_hints=credential_hints(checked),
                now=uow.now(),
            )
            uow.connector_accounts.refresh_default(client_id)
            uow.commit()
        return account

    def notification_keys(self, account_id: str, *, provider: str) -> list[str] | None:
        """The keys an account's notifications are signed with (Adyen's ``hmac_key``); None
        when no account of ``provider`` has that id.  A disabled account's are still read:
        notifications about payments it already made keep arriving."""
        with self.uow() as uow:
            account = uow.connector_accounts.get(account_id)
        if account is None or account.provider != provider:
            return None
        key = open_credentials(self.box, account).get("hmac_key")
        return [key] if key else []

    def default_for(self, client_id: str) -> str | None:
        """The merchant's default account (None: the platform's own account)."""
        with self.uow() as uow:
            return uow.connector_accounts.default_for(client_id)

    def list(self, client_id: str) -> list[ConnectorAccount]:
        with self.uow() as uow:
            return uow.connector_accounts.list_for_client(client_id)

    def get(self, client_id: str, account_id: str) -> ConnectorAccount:
        if not is_connector_account_id(account_id):
            raise AccountNotFound("No such connector account exists.")
        with self.uow() as uow:
            account = uow.connector_accounts.get(account_id, client_id=client_id)
        if account is None:
            raise AccountNotFound("No such connector account exists.")
        return account

    def update(
        self,
        client_id: str,
        account_id: str,
        *,
        if_match: TagList | None,
        name: Any = None,
        credentials: Any = None,
    ) -> ConnectorAccount:
        """A new name and/or new credentials (the whole object, checked as at create)."""
        values: dict[str, Any] = {}
        if name is not None:
            values["name"] = checked_name(name)
        current = self.get(client_id, account_id)
        if credentials is not None:
            checked = checked_credentials(current.provider, credentials)
            values["credentials_encrypted"] = seal_credentials(self.box, checked)
            values["credential_hints"] = credential_hints(checked)
        return self._change(client_id, account_id, if_match, values)

    def disable(
        self, client_id: str, account_id: str, *, if_match: TagList | None, reason: str
    ) -> ConnectorAccount:
        """Disabled: new payments cannot use it (nor default to it); payments that ran on
        it keep it.  Disabling a disabled account changes nothing."""
        return self._change(
            client_id,
            account_id,
            if_match,
            {"status": AccountStatus.DISABLED.value, "disabled_reason": reason[:1000]},
            disabling=True,
        )

    def _change(
        self,
        client_id: str | None,
        account_id: str,
        if_match: TagList | None,
        values: dict[str, Any],
        *,
        disabling: bool = False,
    ) -> ConnectorAccount:
        if not is_connector_account_id(account_id):
            raise AccountNotFound("No such connector account exists.")
        with self.uow() as uow:
            current = uow.connector_accounts.get(account_id, client_id=client_id)
            if current is None:
                raise AccountNotFound("No such connector account exists.")
            if if_match is not None and not if_match.matches_strongly(current.etag):
                raise AccountPreconditionFailed(
                    f"The connector account changed since you read it: its etag is "
                    f"{current.etag}, If-Match named another. Read it again and retry; "
                    "nothing changed."
                )
            if disabling and not current.enabled:
                return current
            if not values:
                return current
            updated = uow.connector_accounts.update(
                account_id, expected_version=current.version, now=uow.now(), **values
            )
            if updated is None:
                raise AccountConflict(
                    "The connector account was changed concurrently; read it again and retry."
                )
            if disabling:
                uow.connector_accounts.refresh_default(current.client_id)
            uow.commit()
        return updated
