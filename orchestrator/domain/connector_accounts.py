"""Connector accounts (``ca_…``): one merchant's account at one provider.

Pure rules only: the record, the id format and how an answer shows credentials (``…last4``
per field, never the value).  Which credentials each provider takes is the provider
package's (``providers.credentials``); storage is ``db.repositories.connector_accounts``;
the use cases are ``services.connector_accounts``.

A payment's account is ``None`` for the platform's own provider account (configured in the
settings): what every payment used before connector accounts existed, and what a merchant
without an enabled account still uses (decision 0062).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

CONNECTOR_ACCOUNT_ID_PATTERN = "^ca_[0-9a-f]{24}$"
_CONNECTOR_ACCOUNT_ID = re.compile(CONNECTOR_ACCOUNT_ID_PATTERN)


def new_connector_account_id() -> str:
    return f"ca_{secrets.token_hex(12)}"


def is_connector_account_id(value: str) -> bool:
    return _CONNECTOR_ACCOUNT_ID.fullmatch(value) is not None


class AccountStatus(StrEnum):
    ENABLED = "enabled"
    DISABLED = "disabled"


@dataclass(frozen=True)
class ConnectorAccount:
    id: str
    client_id: str
    provider: str  # providers.credentials.PROVIDERS
    name: str
    # The credentials as one Fernet token (services.connector_accounts opens it); the
    # ``…last4`` of each field, kept beside it so a list never decrypts anything.
    credentials_encrypted: str
    credential_hints: dict[str, str]
    status: AccountStatus
    disabled_reason: str | None
    version: int
    created_at: datetime
    updated_at: datetime

    @property
    def etag(self) -> str:
        return f'"{self.version}"'

    @property
    def enabled(self) -> bool:
        return self.status is AccountStatus.ENABLED


def credential_hints(credentials: Mapping[str, str]) -> dict[str, str]:
    """What an answer shows of each credential: its last four characters after ``…``
    (fewer when the value is short, so a short value is never shown whole)."""
    hints = {}
    for name in sorted(credentials):
        value = credentials[name]
        shown = 4 if len(value) >= 12 else max(0, len(value) // 3)
        hints[name] = "…" + (value[-shown:] if shown else "")
    return hints
