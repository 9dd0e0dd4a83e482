"""The unit of work: the one place that owns transactions.

A ``UnitOfWork`` is one short transaction: a session (``orchestrator.db.session``, the one
way every statement runs) and the repositories bound to it.  It rolls back unless told to
commit, and services are the only callers of ``commit()``: repositories, routes, tasks and
the CLI never commit.  A provider call must never happen inside one (the worker protocol
opens a new unit of work for every step, after the network call returned).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType

from orchestrator.db.clock import Clock, read_database_now
from orchestrator.db.database import Database
from orchestrator.db.repositories.attempts import AttemptRepository
from orchestrator.db.repositories.audit import AuditRepository
from orchestrator.db.repositories.authorizations import AuthorizationRepository
from orchestrator.db.repositories.carried_calls import CarriedCalls
from orchestrator.db.repositories.charts import ChartRepository
from orchestrator.db.repositories.circuits import CircuitRepository
from orchestrator.db.repositories.clients import ClientRepository
from orchestrator.db.repositories.connector_accounts import ConnectorAccountRepository
from orchestrator.db.repositories.deliveries import DeliveryRepository
from orchestrator.db.repositories.disputes import DisputeRepository
from orchestrator.db.repositories.events import EventRepository
from orchestrator.db.repositories.history import HistoryRepository
from orchestrator.db.repositories.leases import LeaseRepository
from orchestrator.db.repositories.method_owners import MethodOwnerRepository
from orchestrator.db.repositories.money import MoneyRepository
from orchestrator.db.repositories.operations import OperationRepository
from orchestrator.db.repositories.outcomes import OutcomeRepository
from orchestrator.db.repositories.payment_search import PaymentSearchRepository
from orchestrator.db.repositories.payments import PaymentRepository
from orchestrator.db.repositories.provider_events import ProviderEventRepository
from orchestrator.db.repositories.reconciliation import ReconciliationRepository
from orchestrator.db.repositories.routing import RoutingRepository
from orchestrator.db.repositories.sealed_secrets import SealedSecretRepository
from orchestrator.db.repositories.webhook_endpoints import WebhookEndpointRepository
from orchestrator.db.session import Session
from orchestrator.domain.history import ProviderCallRecord


class UnitOfWork:
    clients: ClientRepository
    payments: PaymentRepository
    leases: LeaseRepository
    operations: OperationRepository
    money: MoneyRepository
    authorizations: AuthorizationRepository
    outcomes: OutcomeRepository
    audit: AuditRepository
    history: HistoryRepository
    search: PaymentSearchRepository
    events: EventRepository
    deliveries: DeliveryRepository
    webhook_endpoints: WebhookEndpointRepository
    provider_events: ProviderEventRepository
    disputes: DisputeRepository
    connector_accounts: ConnectorAccountRepository
    method_owners: MethodOwnerRepository
    sealed_secrets: SealedSecretRepository
    routing: RoutingRepository
    circuits: CircuitRepository
    attempts: AttemptRepository
    reconciliation: ReconciliationRepository
    charts: ChartRepository

    def __init__(
        self,
        database: Database,
        clock: Clock,
        *,
        read_only: bool = False,
        single_statement: bool = False,
    ) -> None:
        """``single_statement``: on PostgreSQL each statement is its own transaction (see
        ``Database.session``'s ``autocommit``); only for units whose every statement
        stands alone (see UnitOfWorkFactory's callers)."""
        self._database = database
        self._clock = clock
        self._read_only = read_only
        self._single_statement = single_statement
        self._session: Session | None = None
        self._now: datetime | None = None
        self._carried = CarriedCalls()

    def __enter__(self) -> UnitOfWork:
        self._session = session = self._database.session(
            read_only=self._read_only, autocommit=self._single_statement
        )
        self.clients = ClientRepository(session)
        self.payments = PaymentRepository(session)
        self._carried = CarriedCalls()
        self.leases = LeaseRepository(session, self._carried)
        self.operations = OperationRepository(session, self._carried)
        self.money = MoneyRepository(session)
        self.authorizations = AuthorizationRepository(session)
        self.outcomes = OutcomeRepository(session)
        self.audit = AuditRepository(session)
        self.history = HistoryRepository(session)
        self.search = PaymentSearchRepository(session)
        self.events = EventRepository(session)
        self.deliveries = DeliveryRepository(session)
        self.webhook_endpoints = WebhookEndpointRepository(session)
        self.provider_events = ProviderEventRepository(session)
        self.disputes = DisputeRepository(session)
        self.connector_accounts = ConnectorAccountRepository(session)
        self.method_owners = MethodOwnerRepository(session)
        self.sealed_secrets = SealedSecretRepository(session)
        self.routing = RoutingRepository(session)
        self.circuits = CircuitRepository(session)
        self.attempts = AttemptRepository(session)
        self.reconciliation = ReconciliationRepository(session)
        self.charts = ChartRepository(session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        self._now = None
        if session is not None:
            session.close()  # rolls back what was not committed

    @property
    def session(self) -> Session:
        assert self._session is not None, "unit of work used outside 'with'"
        return self._session

    @property
    def dialect(self) -> str:
        return self.session.dialect

    def now(self) -> datetime:
        """The database clock, read once per unit of work (see orchestrator.db.clock)."""
        if self._now is None:
            self._now = read_database_now(self.session, self._clock)
        return self._now

    def carry_calls(self, calls: list[ProviderCallRecord], now: datetime) -> None:
        """Have the unit's next prebuilt lease UPDATE insert ``calls`` itself (see
        ``orchestrator.db.repositories.carried_calls``), when this unit's statements each
        commit on their own on PostgreSQL: only there does the statement that ran them
        store them for good.  Elsewhere nothing is armed and ``calls_carried`` stays
        False."""
        if self.session.stores_each_statement:
            self._carried.carry(calls, now)

    @property
    def calls_carried(self) -> bool:
        """Whether a statement of this unit stored the calls given to ``carry_calls``."""
        return self._carried.written

    def commit(self) -> None:
        """Commit: the session sends what it held back with the COMMIT (a failure of one
        is raised here, and nothing is committed)."""
        self.session.commit()

    def rollback(self) -> None:
        self.session.rollback()


UnitOfWorkFactory = Callable[[], UnitOfWork]
