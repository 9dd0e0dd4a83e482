"""Webhook endpoints: one API client's subscriptions.  Changes are compare-and-set on
``version`` (the endpoint's ETag), so an ``If-Match`` that lost a race changes nothing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from orchestrator.db.session import Row, Session
from orchestrator.db.tables import api_clients, webhook_endpoints
from orchestrator.domain.webhooks import EndpointStatus, WebhookEndpoint

c = webhook_endpoints.c
# An API client's endpoints are few (Stripe allows 16); the cap bounds a list all the same.
MAX_ENDPOINTS_LISTED = 100


def to_endpoint(m: Row) -> WebhookEndpoint:
    return WebhookEndpoint(
        id=m["id"],
        client_id=m["client_id"],
        url=m["url"],
        events=list(m["events"]),
        description=m["description"],
        status=EndpointStatus(m["status"]),
        disabled_reason=m["disabled_reason"],
        secret_encrypted=m["secret_encrypted"],
        previous_secret_encrypted=m["previous_secret_encrypted"],
        previous_secret_expires_at=m["previous_secret_expires_at"],
        version=m["version"],
        failing_since=m["failing_since"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        rotated_at=m["rotated_at"],
    )


class WebhookEndpointRepository:
    def __init__(self, session: Session) -> None:
        self._db = session

    def lock_client(self, client_id: str) -> None:
        """Queue this transaction behind any other changing the client's endpoints: lock
        the client's row until it ends (PostgreSQL; SQLite's writers are serial already).

        Hazard: two creates at the limit would each count without the other's new row and
        both insert.  Locked first, in a statement of its own, the count that follows reads
        a snapshot taken after the lock was granted (READ COMMITTED), which holds the row
        the previous holder committed.  FOR NO KEY UPDATE, not FOR UPDATE: every insert
        that references the client (a payment, this endpoint) holds a KEY SHARE lock on the
        row, which FOR UPDATE would wait for and block, stalling the merchant's payments."""
        self._db.execute(
            sa.select(api_clients.c.id)
            .where(api_clients.c.id == client_id)
            .with_for_update(key_share=True)
        )

    def add(
        self,
        *,
        endpoint_id: str,
        client_id: str,
        url: str,
        events: list[str],
        description: str | None,
        secret_encrypted: str,
        now: datetime,
    ) -> WebhookEndpoint:
        row = self._db.one(
            webhook_endpoints.insert()
            .values(
                id=endpoint_id,
                client_id=client_id,
                url=url,
                events=events,
                description=description,
                status=EndpointStatus.ENABLED.value,
                secret_encrypted=secret_encrypted,
                version=1,
                created_at=now,
                updated_at=now,
            )
            .returning(*webhook_endpoints.c)
        )
        assert row is not None, "an INSERT … RETURNING returns its row"
        return to_endpoint(row)

    def get(self, endpoint_id: str, *, client_id: str | None = None) -> WebhookEndpoint | None:
        """A live endpoint; scoped to ``client_id`` when given (another client's is None)."""
        query = sa.select(webhook_endpoints).where(c.id == endpoint_id, c.deleted_at.is_(None))
        if client_id is not None:
            query = query.where(c.client_id == client_id)
        row = self._db.one(query)
        return None if row is None else to_endpoint(row)

    def list_for_client(self, client_id: str) -> list[WebhookEndpoint]:
        rows = self._db.all(
            sa.select(webhook_endpoints)
            .where(c.client_id == client_id, c.deleted_at.is_(None))
            .order_by(c.created_at, c.id)
            .limit(MAX_ENDPOINTS_LISTED)
        )
        return [to_endpoint(r) for r in rows]

    def list_all(self, *, limit: int = MAX_ENDPOINTS_LISTED) -> list[WebhookEndpoint]:
        """Every live endpoint (ops), disabled ones first."""
        rows = self._db.all(
            sa.select(webhook_endpoints)
            .where(c.deleted_at.is_(None))
            .order_by(c.status.desc(), c.created_at, c.id)
            .limit(limit)
        )
        return [to_endpoint(r) for r in rows]

    def update(
        self, endpoint_id: str, *, expected_version: int, now: datetime, **values: Any
    ) -> WebhookEndpoint | None:
        """Compare-and-set on ``version``; None when it moved (or the endpoint is gone)."""
        row = self._db.one(
            webhook_endpoints.update()
            .where(
                c.id == endpoint_id,
                c.version == expected_version,
                c.deleted_at.is_(None),
            )
            .values(version=c.version + 1, updated_at=now, **values)
            .returning(*webhook_endpoints.c)
        )
        return None if row is None else to_endpoint(row)

    def record_failure(self, endpoint_id: str, *, now: datetime) -> WebhookEndpoint | None:
        """Start the failing clock unless it runs already (not a version change)."""
        row = self._db.one(
            webhook_endpoints.update()
            .where(c.id == endpoint_id)
            .values(failing_since=sa.func.coalesce(c.failing_since, now))
            .returning(*webhook_endpoints.c)
        )
        return None if row is None else to_endpoint(row)

    def record_success(self, endpoint_id: str) -> None:
        self._db.execute(
            webhook_endpoints.update()
            .where(c.id == endpoint_id, c.failing_since.is_not(None))
            .values(failing_since=None)
        )

    def disable(self, endpoint_id: str, *, reason: str, now: datetime) -> bool:
        """Disable an enabled endpoint (the relay's verdict); False when it was not."""
        result = self._db.execute(
            webhook_endpoints.update()
            .where(c.id == endpoint_id, c.status == EndpointStatus.ENABLED.value)
            .values(
                status=EndpointStatus.DISABLED.value,
                disabled_reason=reason[:500],
                version=c.version + 1,
                updated_at=now,
            )
        )
        return result > 0

    def count_disabled(self) -> int:
        return int(
            self._db.scalar(
                sa.select(sa.func.count()).where(
                    c.status == EndpointStatus.DISABLED.value, c.deleted_at.is_(None)
                )
            )
        )
