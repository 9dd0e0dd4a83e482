"""The webhook endpoints service: create, list, read, update, delete, rotate the secret.

Each call is one unit of work.  Changes to an existing endpoint take an optional
``If-Match`` (the endpoint's ``etag``); a stale one is refused and nothing changes.
The secret is returned by ``create`` and ``rotate`` only: afterwards it exists only
encrypted (``secret_box``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.event_types import EVENT_TYPES, WILDCARD, unknown_event_types
from orchestrator.domain.ids import is_endpoint_id, new_endpoint_id
from orchestrator.domain.preconditions import TagList
from orchestrator.domain.webhooks import EndpointStatus, WebhookEndpoint
from orchestrator.events.secret_box import SecretBox, new_signing_secret
from orchestrator.events.url_rules import (
    DEFAULT_ALLOWED_PORTS,
    DEFAULT_DNS_TIMEOUT_SECONDS,
    RefusedUrl,
    Resolver,
    check_new_endpoint_url,
)

# Stripe's limit too.  Each endpoint receives every event it subscribes to, so the count
# multiplies the relay's work per event; a merchant needs a few (production, staging).
DEFAULT_MAX_ENDPOINTS = 16


class EndpointError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EndpointNotFound(EndpointError):
    pass


class InvalidEndpoint(EndpointError):
    pass


class EndpointPreconditionFailed(EndpointError):
    pass


class EndpointConflict(EndpointError):
    pass


class EndpointLimitReached(EndpointConflict):
    """The client has as many endpoints as it may: every event fans out to each of them."""


@dataclass(frozen=True)
class EndpointWithSecret:
    endpoint: WebhookEndpoint
    secret: str


def normalise_events(events: Sequence[str]) -> list[str]:
    if not events:
        raise InvalidEndpoint('events must list at least one event type, or ["*"] for all.')
    unknown = unknown_event_types(events)
    if unknown:
        raise InvalidEndpoint(
            f"Unknown event type(s): {', '.join(repr(t) for t in unknown[:5])}. "
            f"Known: {', '.join(EVENT_TYPES)}, or '*' for every type."
        )
    if WILDCARD in events:
        return [WILDCARD]
    return list(dict.fromkeys(events))


@dataclass(frozen=True)
class EndpointService:
    uow: UnitOfWorkFactory
    box: SecretBox
    allow_private: bool
    resolver: Resolver
    grace_hours: float
    allowed_ports: frozenset[int] = DEFAULT_ALLOWED_PORTS
    dns_timeout_seconds: float = DEFAULT_DNS_TIMEOUT_SECONDS
    max_endpoints: int = DEFAULT_MAX_ENDPOINTS

    def _check_url(self, url: str) -> str:
        try:
            return check_new_endpoint_url(
                url,
                allow_private=self.allow_private,
                resolver=self.resolver,
                allowed_ports=self.allowed_ports,
                dns_timeout=self.dns_timeout_seconds,
            )
        except RefusedUrl as error:
            raise InvalidEndpoint(str(error)) from None

    def create(
        self, client_id: str, *, url: str, events: Sequence[str], description: str | None
    ) -> EndpointWithSecret:
        checked = self._check_url(url)
        normalised = normalise_events(events)
        secret = new_signing_secret()
        with self.uow() as uow:
            # Counted in the insert's transaction, after the client's row is locked: two
            # creates racing at the limit queue there, and the second counts the first's.
            uow.webhook_endpoints.lock_client(client_id)
            if len(uow.webhook_endpoints.list_for_client(client_id)) >= self.max_endpoints:
                raise EndpointLimitReached(
                    f"This API client has {self.max_endpoints} webhook endpoints, the most it "
                    "may have. Delete one, or subscribe an existing one to more event types."
                )
            endpoint = uow.webhook_endpoints.add(
                endpoint_id=new_endpoint_id(),
                client_id=client_id,
                url=checked,
                events=normalised,
                description=description,
                secret_encrypted=self.box.seal(secret),
                now=uow.now(),
            )
            uow.commit()
        return EndpointWithSecret(endpoint, secret)

    def list(self, client_id: str) -> list[WebhookEndpoint]:
        with self.uow() as uow:
            return uow.webhook_endpoints.list_for_client(client_id)

    def get(self, client_id: str, endpoint_id: str) -> WebhookEndpoint:
        if not is_endpoint_id(endpoint_id):
            raise EndpointNotFound("No such webhook endpoint exists.")
        with self.uow() as uow:
            endpoint = uow.webhook_endpoints.get(endpoint_id, client_id=client_id)
        if endpoint is None:
            raise EndpointNotFound("No such webhook endpoint exists.")
        return endpoint

    def update(
        self,
        client_id: str,
        endpoint_id: str,
        *,
        if_match: TagList | None,
        url: str | None = None,
        events: Sequence[str] | None = None,
        description: str | None = None,
        status: EndpointStatus | None = None,
    ) -> WebhookEndpoint:
        """Change what is given.  ``status=enabled`` re-enables a disabled endpoint (its
        pending deliveries resume; their retry windows may have run out)."""
        values: dict[str, Any] = {}
        if url is not None:
            values["url"] = self._check_url(url)
        if events is not None:
            values["events"] = normalise_events(events)
        if description is not None:
            values["description"] = description
        if status is EndpointStatus.ENABLED:
            values.update(status=status.value, disabled_reason=None, failing_since=None)
        elif status is EndpointStatus.DISABLED:
            values.update(status=status.value, disabled_reason="disabled by the merchant")
        return self._change(client_id, endpoint_id, if_match, lambda _e: values)

    def rotate_secret(
        self, client_id: str, endpoint_id: str, *, if_match: TagList | None
    ) -> EndpointWithSecret:
        """A new secret signs from now on; the old one adds a second signature for the
        grace period, so receivers can switch without losing a delivery."""
        secret = new_signing_secret()

        def values(endpoint: WebhookEndpoint) -> dict[str, Any]:
            return {
                "secret_encrypted": self.box.seal(secret),
                "previous_secret_encrypted": (
                    endpoint.secret_encrypted if self.grace_hours > 0 else None
                ),
                "previous_secret_expires_at": None,  # set below, from the database clock
                "rotated_at": None,
            }

        endpoint = self._change(client_id, endpoint_id, if_match, values, rotating=True)
        return EndpointWithSecret(endpoint, secret)

    def delete(self, client_id: str, endpoint_id: str, *, if_match: TagList | None) -> None:
        self._change(client_id, endpoint_id, if_match, lambda _e: {}, deleting=True)

    def _change(
        self,
        client_id: str,
        endpoint_id: str,
        if_match: TagList | None,
        values_for: Any,
        *,
        rotating: bool = False,
        deleting: bool = False,
    ) -> WebhookEndpoint:
        if not is_endpoint_id(endpoint_id):
            raise EndpointNotFound("No such webhook endpoint exists.")
        with self.uow() as uow:
            current = uow.webhook_endpoints.get(endpoint_id, client_id=client_id)
            if current is None:
                raise EndpointNotFound("No such webhook endpoint exists.")
            if if_match is not None and not if_match.matches_strongly(current.etag):
                raise EndpointPreconditionFailed(
                    f"The endpoint changed since you read it: its etag is {current.etag}, "
                    "If-Match named another. Read it again and retry; nothing changed."
                )
            now = uow.now()
            values = dict(values_for(current))
            if rotating:
                values["rotated_at"] = now
                if values["previous_secret_encrypted"] is not None:
                    values["previous_secret_expires_at"] = now + timedelta(hours=self.grace_hours)
            if deleting:
                values["deleted_at"] = now
            updated = uow.webhook_endpoints.update(
                endpoint_id, expected_version=current.version, now=now, **values
            )
            if updated is None:
                raise EndpointConflict(
                    "The endpoint was changed concurrently; read it again and retry."
                )
            uow.commit()
        return updated
