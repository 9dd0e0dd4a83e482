"""The composition root: the one function that builds the API's, the workers', the
sweeper's and the CLI's dependencies.  Nothing connects at import time; building a
container connects nothing either (engines and brokers connect on first use).

Services take the few collaborators they use, never the container: ``runner()``,
``sweeper()`` and ``relay()`` bind them here, once, and a route or a command passes a
service exactly what it names (``container.uow``, ``container.read_only_uow``,
``container.publisher``, ``container.settings``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from orchestrator.db.clock import Clock, DatabaseClock
from orchestrator.db.database import Database
from orchestrator.db.engine import create_engine
from orchestrator.db.uow import UnitOfWork
from orchestrator.domain.history import ProviderCallRecord
from orchestrator.engine import call_log
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.engine.runner import Runner
from orchestrator.engine.sweep import Sweeper
from orchestrator.events.endpoints import EndpointService
from orchestrator.events.relay import Relay, build_sender
from orchestrator.events.retention import purge_delivered_events
from orchestrator.events.secret_box import SecretBox
from orchestrator.events.url_rules import Resolver, system_resolver
from orchestrator.logging import configure_logging
from orchestrator.providers.observed import ObservedProvider
from orchestrator.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

    from orchestrator.db.accept_claims import AuthenticatedClaim
    from orchestrator.domain.model import ApiClient
    from orchestrator.providers.base import PaymentProvider, ProviderEvent
    from orchestrator.services.accept import AuthenticatedClaimOnLoop
    from orchestrator.services.provider_events import ParseEvent


@dataclass
class Container:
    settings: Settings
    engine: Engine
    clock: Clock
    publisher: TaskPublisher
    provider_factory: Callable[[], PaymentProvider]
    celery_app: Celery | None = None
    # How webhook hosts are resolved (the SSRF checks): tests pass a table, never DNS.
    resolver: Resolver = system_resolver
    # Verifies and reads a provider's webhook (POST /v1/providers/stripe/webhooks).
    parse_provider_event: ParseEvent = field(default_factory=lambda: parse_stripe_event)
    _provider: PaymentProvider | None = field(default=None, repr=False)
    _database: Database | None = field(default=None, repr=False)
    _authenticated_claim: AuthenticatedClaim | None = field(default=None, repr=False)
    _direct_clients: Callable[[str], tuple[ApiClient, str] | None] | None = field(
        default=None, repr=False
    )
    _provider_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def uow(self, *, read_only: bool = False, single_statement: bool = False) -> UnitOfWork:
        """A unit of work; ``read_only`` ones take no write lock on SQLite.
        ``single_statement``: on PostgreSQL every statement commits on its own (one round
        trip each); only for units whose statements need no common transaction."""
        return UnitOfWork(
            self.database, self.clock, read_only=read_only, single_statement=single_statement
        )

    @property
    def database(self) -> Database:
        """The engine's sessions: the one way every statement runs (orchestrator.db.session)."""
        if self._database is None:
            self._database = Database(self.engine)
        return self._database

    def read_only_uow(self) -> UnitOfWork:
        """``uow(read_only=True)`` as a ``UnitOfWorkFactory``: what the services that only
        read are given (on SQLite such a unit takes no write lock)."""
        return self.uow(read_only=True)

    def statement_uow(self) -> UnitOfWork:
        """A unit of work whose statements each commit on their own (the accept's claim,
        the worker's claim)."""
        return self.uow(single_statement=True)

    def lookup_uow(self) -> UnitOfWork:
        """A read-only unit of one statement (the authentication's read)."""
        return self.uow(read_only=True, single_statement=True)

    def find_client(self, key_hash: str) -> tuple[ApiClient, str] | None:
        """The authentication's read by key hash (api_keys.authenticate_by), one statement
        as its own transaction (on PostgreSQL prepared, on a pooled connection in
        autocommit: ``Database.one``)."""
        if self._direct_clients is None:
            from orchestrator.db.accept_claims import ClientLookup

            self._direct_clients = ClientLookup(self.database)
        return self._direct_clients(key_hash)

    @property
    def authenticated_claim(self) -> AuthenticatedClaim | None:
        """The accept's authentication and claim in one statement
        (services.accept.authenticate_and_accept): PostgreSQL's; None on SQLite, which
        keeps the read and the claim apart."""
        if self.engine.dialect.name != "postgresql":
            return None
        if self._authenticated_claim is None:
            from orchestrator.db.accept_claims import AuthenticatedClaim

            self._authenticated_claim = AuthenticatedClaim(self.database, self.clock)
        return self._authenticated_claim

    def async_authenticated_claim(self) -> AuthenticatedClaimOnLoop | None:
        """The accept's statements on the API's event loop, on a new set of asyncio
        connections (orchestrator.db.async_session): PostgreSQL with ``WAKE_UP=notify``
        only (``publish`` publishes on the request, which the event loop must not).  The
        caller closes it."""
        if self.engine.dialect.name != "postgresql" or self.settings.wake_up_mode != "notify":
            return None
        from orchestrator.db.accept_claims import LoopAuthenticatedClaim
        from orchestrator.db.async_session import PostgresAsyncDatabase

        database = PostgresAsyncDatabase(self.engine, self.settings)
        return LoopAuthenticatedClaim(database, self.clock)

    @property
    def provider(self) -> PaymentProvider:
        """The provider, always behind the one observing wrapper (``ObservedProvider``:
        metrics by operation and outcome, latency, and a ``provider_calls`` row per call for
        the operator's payment page), whichever factory built it."""
        if self._provider is None:
            # Locked: the first tasks of a threads worker (128 at once) each built a client
            # of their own otherwise, an SSL context and a connection pool apiece.
            with self._provider_lock:
                if self._provider is None:
                    built = self.provider_factory()
                    if isinstance(built, ObservedProvider):  # never measured twice
                        built = built.inner
                    self._provider = ObservedProvider(built, self.record_provider_call)
        return self._provider

    def runner(self) -> Runner:
        """What the engine needs to run an operation: transactions, provider, settings."""
        return Runner(
            uow=self.uow,
            provider=self.provider,
            settings=self.settings,
            claim_uow=self.statement_uow,
        )

    def sweeper(self, name: str | None = None) -> Sweeper:
        return Sweeper(
            self.uow,
            self.publisher,
            self.settings,
            purge_events=partial(purge_delivered_events, self.uow, self.settings),
            name=name,
        )

    def relay(self, name: str | None = None) -> Relay:
        """A webhook relay: its transactions, its settings, the secrets' box and a sender
        that resolves hosts with ``resolver`` (the SSRF checks)."""
        return Relay(
            self.uow,
            self.read_only_uow,
            self.settings,
            box=self.secret_box(),
            sender=build_sender(self.settings, self.resolver),
            name=name,
        )

    def record_provider_call(self, call: ProviderCallRecord) -> None:
        """Store one provider call: inside an engine run, with the run's next fenced write
        (``engine.call_log``); elsewhere in its own short transaction after the call
        returned."""
        if call_log.hold(call):
            return
        with self.uow() as uow:
            uow.history.add_provider_call(call, now=uow.now())
            uow.commit()

    def secret_box(self) -> SecretBox:
        return SecretBox(self.settings.secret_key.get_secret_value())

    def endpoint_service(self) -> EndpointService:
        return EndpointService(
            uow=self.uow,
            box=self.secret_box(),
            allow_private=self.settings.webhook_private_targets_allowed,
            resolver=self.resolver,
            grace_hours=self.settings.webhook_secret_grace_hours,
        )

    def close(self) -> None:
        self.engine.dispose()


def parse_stripe_event(payload: bytes, signature: str | None, secret: str) -> ProviderEvent:
    """Stripe's webhook verification, imported on first use (only the adapter imports
    ``stripe``)."""
    from orchestrator.providers.stripe_objects import parse_webhook_event

    return parse_webhook_event(payload, signature, secret)


def _stripe_provider_factory(settings: Settings) -> Callable[[], PaymentProvider]:
    def build() -> PaymentProvider:
        from orchestrator.providers.stripe_adapter import StripeProvider

        return StripeProvider.from_settings(settings)

    return build


def bootstrap(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    publisher: TaskPublisher | None = None,
    provider_factory: Callable[[], PaymentProvider] | None = None,
    engine: Engine | None = None,
) -> Container:
    """Build everything from settings; tests and the demo inject fakes as arguments."""
    settings = settings or Settings()
    configure_logging(settings)
    celery_app = None
    if publisher is None:
        from orchestrator.broker import CeleryPublisher, create_celery_app

        celery_app = create_celery_app(settings)
        publisher = CeleryPublisher(celery_app)
    return Container(
        settings=settings,
        engine=engine or create_engine(settings),
        clock=clock or DatabaseClock(),
        publisher=publisher,
        provider_factory=provider_factory or _stripe_provider_factory(settings),
        celery_app=celery_app,
    )
