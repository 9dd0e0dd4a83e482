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
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine

from orchestrator.db.clock import Clock, DatabaseClock
from orchestrator.db.database import Database
from orchestrator.db.engine import create_engine
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.circuit import PLATFORM_CIRCUIT_KEY
from orchestrator.domain.connector_accounts import ConnectorAccount
from orchestrator.domain.history import ProviderCallRecord
from orchestrator.domain.lease_state import Leased
from orchestrator.domain.model import PaymentRecord
from orchestrator.domain.operations import OperationRecord
from orchestrator.engine import call_log
from orchestrator.engine.circuits import CircuitBoard, policy_of, release_waiting
from orchestrator.engine.publisher import TaskPublisher
from orchestrator.engine.reconcile import Account, Reconciler
from orchestrator.engine.runner import Runner
from orchestrator.engine.sweep import Sweeper
from orchestrator.events.endpoints import EndpointService
from orchestrator.events.relay import Relay, build_sender
from orchestrator.events.retention import purge_delivered_events
from orchestrator.events.secret_box import SecretBox
from orchestrator.events.url_rules import Resolver, system_resolver
from orchestrator.logging import configure_logging
from orchestrator.providers.base import (
    Permanent,
    ProviderEventLog,
    ReconciliationSource,
    RecordedPayment,
)
from orchestrator.providers.observed import ObservedProvider
from orchestrator.services.connector_accounts import (
    ConnectorAccountService,
    UnreadableCredentials,
    credentials_box,
    open_credentials,
)
from orchestrator.services.routing import RoutingService
from orchestrator.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

    from orchestrator.db.accept_claims import AuthenticatedClaim
    from orchestrator.domain.model import ApiClient
    from orchestrator.providers.base import PaymentProvider, ProviderEvent
    from orchestrator.services.accept import AuthenticatedClaimOnLoop
    from orchestrator.services.provider_events import ParseEvent, ParseNotifications


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
    # Verifies and reads a connector account's notifications, by provider
    # (POST /v1/providers/adyen/notifications/{ca_id}).
    parse_notifications: dict[str, ParseNotifications] = field(
        default_factory=lambda: {"adyen": parse_adyen_notifications}
    )
    _provider: PaymentProvider | None = field(default=None, repr=False)
    _database: Database | None = field(default=None, repr=False)
    _authenticated_claim: AuthenticatedClaim | None = field(default=None, repr=False)
    _direct_clients: Callable[[str], tuple[ApiClient, str] | None] | None = field(
        default=None, repr=False
    )
    _provider_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Connector accounts' providers: provider name -> factory (account, its credentials).
    # The Adyen adapter registers "adyen" here; an account of a provider with no factory
    # parks its payments with "no adapter for provider … yet".
    provider_factories: dict[str, AccountProviderFactory] = field(default_factory=dict)
    _registry: ProviderRegistry | None = field(default=None, repr=False)
    # Every connector account's circuit as this process sees it (decision 0082).
    _circuits: CircuitBoard | None = field(default=None, repr=False)
    # Its own lock: the board is first built while ``_provider_lock`` is held.
    _circuits_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
                    observed = self.observed(self.provider_factory())
                    self._provider = self.guarded(observed, PLATFORM_CIRCUIT_KEY)
        return self._provider

    def observed(self, built: PaymentProvider) -> PaymentProvider:
        """``built`` behind the one observing wrapper (never measured twice)."""
        if isinstance(built, ObservedProvider):
            built = built.inner
        return ObservedProvider(built, self.record_provider_call)

    @property
    def circuits(self) -> CircuitBoard:
        if self._circuits is None:
            with self._circuits_lock:
                if self._circuits is None:
                    # The views are read in autocommit (no ROLLBACK on a pooled
                    # connection: decision 0091); transitions in transactions.
                    self._circuits = CircuitBoard(
                        self.uow, policy_of(self.settings), read_uow=self.lookup_uow
                    )
        return self._circuits

    def guarded(self, provider: PaymentProvider, circuit_key: str) -> PaymentProvider:
        """An observed provider behind its connector account's circuit (``circuit_key``:
        ``domain.circuit.circuit_key``); any other provider unchanged."""
        if isinstance(provider, ObservedProvider):
            return provider.gated(self.circuits.gate(circuit_key))
        return provider

    @property
    def providers(self) -> ProviderRegistry:
        """The provider of each connector account (``ProviderRegistry``)."""
        if self._registry is None:
            with self._provider_lock:
                if self._registry is None:
                    self._registry = ProviderRegistry(
                        platform=lambda: self.provider,
                        # Its reads run on every claimed record of a connector account,
                        # each one statement: in autocommit, so no ROLLBACK makes psycopg
                        # deallocate the pooled connection's prepared statements (0091).
                        uow=self.lookup_uow,
                        box=credentials_box(self.settings.secret_key_ring),
                        factories=self.provider_factories,
                        observe=self.observed,
                        guard=self.guarded,
                    )
        return self._registry

    def provider_for(self, connector_account_id: str | None) -> PaymentProvider:
        """The provider of a connector account (None: the platform's Stripe account)."""
        return self.providers.provider_for(connector_account_id)

    def connector_account_service(self) -> ConnectorAccountService:
        return ConnectorAccountService(
            uow=self.uow, box=credentials_box(self.settings.secret_key_ring)
        )

    def routing_service(self) -> RoutingService:
        return RoutingService(uow=self.uow)

    def reconciliation_targets(self, connector: str | None = None) -> list[ReconcileTarget]:
        """The accounts ``payorch reconcile`` compares: ``connector`` alone (``ca_…``, or
        ``ca_platform_stripe``), else the platform's Stripe account and every enabled
        connector account.  Each comes with its source (Stripe's list calls; an Adyen
        account's settlement details reports, decision 0106), or why it has none: a provider
        without a source, credentials that no longer decrypt."""
        if connector == PLATFORM_CIRCUIT_KEY:
            accounts: list[ConnectorAccount] = []
        else:
            with self.read_only_uow() as uow:
                if connector is None:
                    accounts = [a for a in uow.connector_accounts.list_all() if a.enabled]
                else:
                    found = uow.connector_accounts.get(connector)
                    if found is None:
                        raise UnknownConnectorAccount(connector)
                    accounts = [found]
        targets: list[ReconcileTarget] = []
        if connector in (None, PLATFORM_CIRCUIT_KEY):
            platform = Account(PLATFORM_CIRCUIT_KEY, None, "stripe")
            targets.append(ReconcileTarget(platform, self._platform_source(), None))
        box = credentials_box(self.settings.secret_key_ring)
        for account in accounts:
            target = Account(account.id, account.id, account.provider)
            builder = _RECONCILIATION_SOURCES.get(account.provider)
            if builder is None:
                targets.append(
                    ReconcileTarget(
                        target, None, f"no reconciliation source for {account.provider}"
                    )
                )
                continue
            try:
                credentials = open_credentials(box, account)
            except UnreadableCredentials as error:
                targets.append(ReconcileTarget(target, None, error.message))
                continue
            targets.append(ReconcileTarget(target, builder(self.settings, credentials), None))
        return targets

    def _platform_source(self) -> ReconciliationSource:
        from orchestrator.providers.stripe_adapter import StripeProvider

        # Not the workers' provider: reconciliation's reads are no payment's calls (no
        # provider_calls rows) and must not count against the account's circuit.
        return StripeProvider.from_settings(self.settings)

    def reconciler(
        self, target: ReconcileTarget, *, owner: str, max_pages: int | None = None
    ) -> Reconciler:
        assert target.source is not None, target.skipped
        return Reconciler(self.uow, target.source, target.account, owner=owner, max_pages=max_pages)

    def runner(self) -> Runner:
        """What the engine needs to run an operation: transactions, provider, settings."""
        return Runner(
            uow=self.uow,
            provider=self.provider,
            settings=self.settings,
            claim_uow=self.statement_uow,
            provider_for=self.providers.provider_for_record,
        )

    def sweeper(self, name: str | None = None) -> Sweeper:
        return Sweeper(
            self.uow,
            self.publisher,
            self.settings,
            purge_events=partial(purge_delivered_events, self.uow, self.settings),
            name=name,
            release_waits=partial(release_waiting, self.uow, self.settings),
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
        return SecretBox(self.settings.secret_key_ring)

    def endpoint_service(self) -> EndpointService:
        return EndpointService(
            uow=self.uow,
            box=self.secret_box(),
            allow_private=self.settings.webhook_private_targets_allowed,
            resolver=self.resolver,
            grace_hours=self.settings.webhook_secret_grace_hours,
            allowed_ports=frozenset(self.settings.webhook_allowed_ports),
            dns_timeout_seconds=self.settings.webhook_dns_timeout_seconds,
            max_endpoints=self.settings.webhook_endpoints_per_client,
        )

    def close(self) -> None:
        self.engine.dispose()


def parse_adyen_notifications(payload: bytes, keys: list[str]) -> list[ProviderEvent]:
    """Adyen's HMAC-verified notification items, imported on first use."""
    from orchestrator.providers.adyen_notifications import parse_notifications

    return parse_notifications(payload, keys)


def parse_stripe_event(payload: bytes, signature: str | None, secret: str) -> ProviderEvent:
    """Stripe's webhook verification, imported on first use (only the adapter imports
    ``stripe``)."""
    from orchestrator.providers.stripe_objects import parse_webhook_event

    return parse_webhook_event(payload, signature, secret)


# (the account, its decrypted credentials, its provider's stored events) -> its provider,
# unobserved.
AccountProviderFactory = Callable[
    [ConnectorAccount, dict[str, str], ProviderEventLog], "PaymentProvider"
]


class StoredEventLog:
    """``ProviderEventLog`` over the provider_events table: one provider's stored events,
    read in a short read-only transaction of their own (never inside a caller's)."""

    def __init__(self, uow: UnitOfWorkFactory, provider: str) -> None:
        self._uow = uow
        self._provider = provider

    def payloads(
        self, *, provider_payment_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        if provider_payment_id is None and record_id is None:
            return []
        with self._uow() as uow:
            return uow.provider_events.payloads_about(
                self._provider, provider_payment_id=provider_payment_id, payment_id=record_id
            )

    def recorded_payment(self, provider_payment_id: str) -> RecordedPayment | None:
        with self._uow() as uow:
            row = uow.provider_events.recorded_payment(provider_payment_id)
        if row is None:
            return None
        return RecordedPayment(
            record_id=row["id"],
            amount=row["amount"],
            currency=row["currency"],
            capture_method=row["capture_method"],
        )


class UnknownConnectorAccount(Exception):
    def __init__(self, account_id: str) -> None:
        super().__init__(f"no connector account {account_id}")
        self.account_id = account_id


@dataclass(frozen=True)
class ReconcileTarget:
    """One account to reconcile: its source, or why it has none (``skipped``)."""

    account: Account
    source: ReconciliationSource | None
    skipped: str | None


class ProviderRegistry:
    """``provider_for(connector_account_id | None)``: None is the platform's provider (the
    container's, as before connector accounts); an account's provider is built by its
    provider's factory from its credentials, observed like the platform's, and cached per
    (account, version), so new credentials take effect on the next run and an unchanged
    account costs one primary-key read per run.

    ``Permanent`` (the runner parks the record, no call made): no such account, no
    factory for its provider (Adyen until its adapter registers one), or credentials that
    no longer decrypt."""

    def __init__(
        self,
        *,
        platform: Callable[[], PaymentProvider],
        uow: UnitOfWorkFactory,
        box: SecretBox,
        factories: dict[str, AccountProviderFactory],
        observe: Callable[[PaymentProvider], PaymentProvider],
        guard: Callable[[PaymentProvider, str], PaymentProvider] | None = None,
    ) -> None:
        self._platform = platform
        # An account's provider behind its circuit (``Container.guarded``; None: unguarded).
        self._guard = guard
        self._uow = uow
        self._box = box
        self._factories = factories
        self._observe = observe
        self._cache: dict[str, tuple[int, PaymentProvider]] = {}
        self._lock = threading.Lock()

    def provider_for(self, connector_account_id: str | None) -> PaymentProvider:
        if connector_account_id is None:
            return self._platform()
        with self._uow() as uow:
            account = uow.connector_accounts.get(connector_account_id)
        if account is None:
            raise Permanent(f"connector account {connector_account_id} does not exist")
        cached = self._cache.get(account.id)
        if cached is not None and cached[0] == account.version:
            return cached[1]
        factory = self._factories.get(account.provider)
        if factory is None:
            raise Permanent(f"no adapter for provider {account.provider} yet")
        try:
            credentials = open_credentials(self._box, account)
        except UnreadableCredentials as error:
            raise Permanent(error.message) from None
        with self._lock:
            cached = self._cache.get(account.id)
            if cached is None or cached[0] != account.version:
                events = StoredEventLog(self._uow, account.provider)
                built = factory(account, credentials, events)
                observed = self._observe(built)
                if self._guard is not None:
                    observed = self._guard(observed, account.id)
                cached = (account.version, observed)
                self._cache[account.id] = cached
        return cached[1]

    def provider_for_record(self, record: Leased) -> PaymentProvider:
        """The provider of the account a claimed record runs on: a payment's own; an
        operation's (refund, capture, cancel) is its payment's."""
        if isinstance(record, PaymentRecord):
            return self.provider_for(record.connector_account_id)
        if isinstance(record, OperationRecord):
            with self._uow() as uow:
                account_id = uow.connector_accounts.account_of_payment(record.payment_id)
            return self.provider_for(account_id)
        return self._platform()


def _stripe_account_factory(settings: Settings) -> AccountProviderFactory:
    def build(
        account: ConnectorAccount, credentials: dict[str, str], events: ProviderEventLog
    ) -> PaymentProvider:
        from orchestrator.providers.stripe_adapter import StripeProvider

        # Its own key, or the platform's key with the connected account's id.
        return StripeProvider.from_settings(
            settings,
            api_key=credentials.get("api_key"),
            stripe_account=credentials.get("stripe_account"),
        )

    return build


def _adyen_account_factory(settings: Settings) -> AccountProviderFactory:
    def build(
        account: ConnectorAccount, credentials: dict[str, str], events: ProviderEventLog
    ) -> PaymentProvider:
        from orchestrator.providers.adyen_adapter import AdyenProvider

        # The account's live prefix when it has one, else the configured Checkout root.
        return AdyenProvider(
            api_key=credentials["api_key"],
            merchant_account=credentials["merchant_account"],
            api_base=settings.adyen_api_base,
            live_url_prefix=credentials.get("live_url_prefix") or None,
            connect_timeout=settings.provider_connect_timeout_seconds,
            read_timeout=settings.provider_timeout_seconds,
            events=events,
            technical_cancel_after=settings.technical_cancel_threshold,
        )

    return build


def _stripe_source(settings: Settings, credentials: dict[str, str]) -> ReconciliationSource:
    from orchestrator.providers.stripe_adapter import StripeProvider

    # Its own key, or the platform's key with the connected account's id.
    return StripeProvider.from_settings(
        settings,
        api_key=credentials.get("api_key"),
        stripe_account=credentials.get("stripe_account"),
    )


def _adyen_source(settings: Settings, credentials: dict[str, str]) -> ReconciliationSource:
    """The account's Settlement details reports (decision 0106)."""
    from orchestrator.providers.adyen_settlement_source import (
        LIVE_REPORTS_BASE,
        AdyenSettlementSource,
    )

    live = bool(credentials.get("live_url_prefix"))
    return AdyenSettlementSource(
        api_key=credentials["api_key"],
        merchant_account=credentials["merchant_account"],
        reports_base=LIVE_REPORTS_BASE if live else settings.adyen_reports_base,
        connect_timeout=settings.provider_connect_timeout_seconds,
        read_timeout=settings.provider_timeout_seconds,
    )


# An account's reconciliation source, by its provider.
_RECONCILIATION_SOURCES: dict[str, Callable[[Settings, dict[str, str]], ReconciliationSource]] = {
    "stripe": _stripe_source,
    "adyen": _adyen_source,
}


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
        provider_factories={
            "stripe": _stripe_account_factory(settings),
            "adyen": _adyen_account_factory(settings),
        },
    )
