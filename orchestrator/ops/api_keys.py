"""What operators do with a client's API keys: list them, issue another, revoke one
(issuing and revoking audited, with a reason).

The ops API and the CLI call these (one implementation).  Each change is one transaction
with its audit row (its ``payment_id`` column names the subject: the key's id).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.model import ApiKey, AuditEntry
from orchestrator.engine.takeover import Actor
from orchestrator.ops.errors import clean_reason
from orchestrator.services.api_keys import IssuedKey, issue_key

ISSUE_ACTION = "issue_api_key"
REVOKE_ACTION = "revoke_api_key"


class ClientNotFound(LookupError):
    pass


class KeyNotFound(LookupError):
    pass


@dataclass(frozen=True)
class KeyIssued:
    issued: IssuedKey
    audit: AuditEntry


@dataclass(frozen=True)
class KeyRevoked:
    key: ApiKey
    # None: it was revoked already (nothing changed, nothing audited).
    audit: AuditEntry | None


def list_keys(uow: UnitOfWorkFactory, client_id: str) -> list[ApiKey]:
    with uow() as unit:
        if unit.clients.get(client_id) is None:
            raise ClientNotFound(client_id)
        return unit.clients.keys(client_id)


def issue_client_key(
    uow: UnitOfWorkFactory, actor: Actor, client_id: str, *, reason: str
) -> KeyIssued:
    """Another key for an active client; its other keys keep working."""
    why = clean_reason(reason)
    with uow() as unit:
        client = unit.clients.get(client_id)
        if client is None or client.revoked_at is not None:
            # A revoked client's keys never authenticate: a new one would be a dead key.
            raise ClientNotFound(client_id)
        issued = issue_key(unit, client)
        assert issued.key is not None
        audit = unit.audit.add(
            actor_client_id=actor.client_id,
            actor_name=actor.name,
            action=ISSUE_ACTION,
            payment_id=issued.key.id,
            reason=why,
            old_token=None,
            new_token=None,
            now=unit.now(),
        )
        unit.commit()
    return KeyIssued(issued, audit)


def revoke_client_key(
    uow: UnitOfWorkFactory, actor: Actor, client_id: str, key_id: str, *, reason: str
) -> KeyRevoked:
    """Revoke one of a client's keys at once (the next request with it is 401)."""
    why = clean_reason(reason)
    with uow() as unit:
        current = unit.clients.get_key(key_id)
        if current is None or current.client_id != client_id:
            raise KeyNotFound(key_id)
        if not current.active:
            return KeyRevoked(current, None)
        now = unit.now()
        revoked = unit.clients.revoke_key(key_id, now)
        if revoked is None:
            return KeyRevoked(unit.clients.get_key(key_id) or current, None)
        audit = unit.audit.add(
            actor_client_id=actor.client_id,
            actor_name=actor.name,
            action=REVOKE_ACTION,
            payment_id=key_id,
            reason=why,
            old_token=None,
            new_token=None,
            now=now,
        )
        unit.commit()
    return KeyRevoked(revoked, audit)
