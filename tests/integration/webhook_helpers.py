"""Shared by the webhook tests: seed finished payments through the real finishing code,
register endpoints over HTTP, read deliveries and attempts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from orchestrator.bootstrap import Container
from orchestrator.db.tables import (
    outbox_events,
    webhook_deliveries,
    webhook_delivery_attempts,
)
from orchestrator.domain.model import ApiClient
from orchestrator.engine.kinds.charge import process_payment
from tests.harness.seeds import accept
from tests.integration.hardening_helpers import Api


class MovableClock:
    """The database clock seam (``coalesce(:now, now())``) at an instant the test moves."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime.now(UTC)

    def override(self) -> datetime | None:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def resolver_table(mapping: dict[str, list[str]]) -> Callable[[str, int], list[str]]:
    def resolve(host: str, port: int) -> list[str]:
        if host not in mapping:
            raise OSError(f"{host} does not resolve (test table)")
        return mapping[host]

    return resolve


def client_of(container: Container, client_id: str) -> ApiClient:
    with container.uow() as uow:
        client = uow.clients.get(client_id)
    assert client is not None
    return client


def finished_payment(
    container: Container, client: ApiClient, key: str, *, payment_method: str = "pm_card_visa"
) -> str:
    """Accept and process a payment with the fake provider: the finishing transaction
    writes its outbox event exactly as in production."""
    record = accept(container, client, key, payment_method=payment_method)
    process_payment(container.runner(), record.id, record.lease_token, sleep=lambda _s: None)
    return record.id


def register(api: Api, url: str, events: list[str] | None = None, key: str | None = None) -> Any:
    with api.client(key) as client:
        response = client.post(
            "/v1/webhook_endpoints", json={"url": url, "events": events or ["*"]}
        )
    assert response.status_code == 201, response.text
    return response.json()


def event_ids(container: Container) -> list[str]:
    with container.engine.connect() as conn:
        return list(
            conn.execute(sa.select(outbox_events.c.public_id).order_by(outbox_events.c.id))
            .scalars()
            .all()
        )


def delivery_rows(container: Container) -> list[Any]:
    with container.engine.connect() as conn:
        return list(conn.execute(sa.select(webhook_deliveries).order_by(webhook_deliveries.c.id)))


def attempt_rows(container: Container) -> list[Any]:
    with container.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(webhook_delivery_attempts).order_by(webhook_delivery_attempts.c.id)
            )
        )
