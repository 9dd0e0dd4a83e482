"""Routing configurations (one per merchant) and the routing decisions payments record.

A ``PUT`` replaces the configuration whole with a compare-and-set on ``version`` (its
ETag), and sets ``api_clients.routing_version`` in the same transaction: the accept's
one-statement claim reads that column with the client's row and leaves a merchant with a
configuration to the thread path, which reads the configuration here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from orchestrator.db.session import Session
from orchestrator.db.tables import api_clients, payments, routing_configurations
from orchestrator.domain.routing import RoutingConfiguration, parse_configuration

r = routing_configurations.c
# The console shows the newest decisions; the cap bounds the read.
MAX_DECISIONS_LISTED = 100


@dataclass(frozen=True)
class StoredConfiguration:
    client_id: str
    configuration: RoutingConfiguration
    version: int
    updated_at: datetime


@dataclass(frozen=True)
class RoutingDecision:
    """A payment as routing decided it (the console's list)."""

    payment_id: str
    amount: int
    currency: str
    status: str
    connector_account_id: str | None
    route: tuple[str, ...]
    rule: str | None
    skipped: tuple[dict[str, str], ...]
    created_at: datetime


def _configuration(rules: Any, default: Any) -> RoutingConfiguration:
    # Stored documents were validated at PUT; parsing again keeps one reader of the shape.
    return parse_configuration({"rules": rules, "default": default})


class RoutingRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def get(self, client_id: str) -> StoredConfiguration | None:
        row = self._db.one(sa.select(routing_configurations).where(r.client_id == client_id))
        if row is None:
            return None
        return StoredConfiguration(
            client_id=row["client_id"],
            configuration=_configuration(row["rules"], row["default_route"]),
            version=row["version"],
            updated_at=row["updated_at"],
        )

    def put(
        self,
        client_id: str,
        configuration: RoutingConfiguration,
        *,
        expected_version: int | None,
        now: datetime,
    ) -> StoredConfiguration | None:
        """Store ``configuration`` as version ``expected_version + 1`` (1 when
        ``expected_version`` is None: none stored yet).  None when the stored version is
        not ``expected_version`` (a concurrent PUT won): nothing changed."""
        document = configuration.document()
        values = {"rules": document["rules"], "default_route": document["default"]}
        if expected_version is None:
            insert = postgresql.insert if self._db.dialect == "postgresql" else sqlite.insert
            row = self._db.one(
                insert(routing_configurations)
                .values(client_id=client_id, version=1, updated_at=now, **values)
                .on_conflict_do_nothing(index_elements=["client_id"])
                .returning(r.version)
            )
        else:
            row = self._db.one(
                routing_configurations.update()
                .where(r.client_id == client_id, r.version == expected_version)
                .values(version=r.version + 1, updated_at=now, **values)
                .returning(r.version)
            )
        if row is None:
            return None
        version = int(row["version"])
        self._db.execute(
            api_clients.update()
            .where(api_clients.c.id == client_id)
            .values(routing_version=version)
        )
        return StoredConfiguration(client_id, configuration, version, now)

    def recent_decisions(
        self, client_id: str, *, limit: int = MAX_DECISIONS_LISTED
    ) -> list[RoutingDecision]:
        """The merchant's newest payments with the route each was given."""
        p = payments.c
        rows = self._db.all(
            sa.select(
                p.id,
                p.amount,
                p.currency,
                p.status,
                p.connector_account_id,
                p.route,
                p.route_rule,
                p.route_skipped,
                p.created_at,
            )
            .where(p.client_id == client_id)
            .order_by(p.created_at.desc(), p.id.desc())
            .limit(min(limit, MAX_DECISIONS_LISTED))
        )
        return [
            RoutingDecision(
                payment_id=row["id"],
                amount=row["amount"],
                currency=row["currency"],
                status=row["status"],
                connector_account_id=row["connector_account_id"],
                route=tuple(row["route"] or ()),
                rule=row["route_rule"],
                skipped=tuple(row["route_skipped"] or ()),
                created_at=row["created_at"],
            )
            for row in rows
        ]
