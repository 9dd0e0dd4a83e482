"""The unit of work: the one place that owns transactions.

A ``UnitOfWork`` is one short transaction.  It rolls back unless told to commit, and
services are the only callers of ``commit()``: repositories, routes, tasks and the CLI
never commit.  A provider call must never happen inside one (the worker protocol opens a
new unit of work for every step, after the network call returned).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from orchestrator.db import prebuilt
from orchestrator.db.clock import Clock, read_database_now
from orchestrator.db.engine import READ_ONLY_OPTION
from orchestrator.db.repositories.audit import AuditRepository
from orchestrator.db.repositories.authorizations import AuthorizationRepository
from orchestrator.db.repositories.carried_calls import CarriedCalls
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
from orchestrator.db.repositories.webhook_endpoints import WebhookEndpointRepository
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

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        *,
        read_only: bool = False,
        single_statement: bool = False,
        connection: sa.Connection | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._read_only = read_only
        self._single_statement = single_statement
        # A connection the caller owns (the async accept path's, in AUTOCOMMIT): used as
        # it is, and not closed here.
        self._given = connection
        self._connection: sa.Connection | None = None
        self._transaction: sa.RootTransaction | None = None
        self._now: datetime | None = None
        self._deferred: prebuilt.DeferredAnswers | None = None
        self._carried = CarriedCalls()

    def __enter__(self) -> UnitOfWork:
        self._connection = self._given if self._given is not None else self._engine.connect()
        if (
            self._given is None
            and self._single_statement
            and self._connection.dialect.name == "postgresql"
        ):
            # Each statement is its own transaction: no BEGIN and no COMMIT/ROLLBACK round
            # trips (psycopg skips both when the session is idle), and no ROLLBACK that
            # would make psycopg deallocate its prepared statements.  Only for units whose
            # every statement stands alone (see UnitOfWorkFactory's callers).  The pool
            # resets the mode client-side when the connection is returned.
            self._connection.execution_options(isolation_level="AUTOCOMMIT")
        if self._read_only:
            self._connection.execution_options(**{READ_ONLY_OPTION: True})
        self._transaction = self._connection.begin()
        conn = self._connection
        self.clients = ClientRepository(conn)
        self.payments = PaymentRepository(conn)
        self._carried = CarriedCalls()
        self.leases = LeaseRepository(conn, self._carried)
        self.operations = OperationRepository(conn, self._carried)
        self.money = MoneyRepository(conn)
        self.authorizations = AuthorizationRepository(conn)
        self.outcomes = OutcomeRepository(conn)
        self.audit = AuditRepository(conn)
        self.history = HistoryRepository(conn)
        self.search = PaymentSearchRepository(conn)
        self.events = EventRepository(conn)
        self.deliveries = DeliveryRepository(conn)
        self.webhook_endpoints = WebhookEndpointRepository(conn)
        self.provider_events = ProviderEventRepository(conn)
        self.disputes = DisputeRepository(conn)
        self.connector_accounts = ConnectorAccountRepository(conn)
        self.method_owners = MethodOwnerRepository(conn)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # Without a commit the deferred answers do not matter (the unit rolls back):
            # collected, never raised.
            self._end_deferred(exc if exc is not None else _NotCommitted())
            if self._transaction is not None and self._transaction.is_active:
                self._transaction.rollback()
        finally:
            self._deferred = None
            if self._connection is not None and self._given is None:
                self._connection.close()
            self._connection = None
            self._transaction = None
            self._now = None

    @property
    def connection(self) -> sa.Connection:
        """The unit's connection (orchestrator.db.direct runs the claim on its driver's)."""
        assert self._connection is not None, "unit of work used outside 'with'"
        return self._connection

    @property
    def dialect(self) -> str:
        assert self._connection is not None, "unit of work used outside 'with'"
        return self._connection.dialect.name

    def now(self) -> datetime:
        """The database clock, read once per unit of work (see orchestrator.db.clock)."""
        assert self._connection is not None, "unit of work used outside 'with'"
        if self._now is None:
            self._now = read_database_now(self._connection, self._clock)
        return self._now

    def carry_calls(self, calls: list[ProviderCallRecord], now: datetime) -> None:
        """Have the unit's next prebuilt lease UPDATE insert ``calls`` itself (see
        ``orchestrator.db.repositories.carried_calls``), when this unit's statements each
        commit on their own on psycopg: only there does the statement that ran them store
        them for good.  Elsewhere nothing is armed and ``calls_carried`` stays False."""
        if self._single_statement and self._given is None and prebuilt.is_direct(self.connection):
            self._carried.carry(calls, now)

    @property
    def calls_carried(self) -> bool:
        """Whether a statement of this unit stored the calls given to ``carry_calls``."""
        return self._carried.written

    def defer_answers(self) -> None:
        """From here to the commit, the statements run for their effect (the prebuilt
        INSERTs) are sent without waiting for each answer, and collected with the COMMIT
        in one round trip (``orchestrator.db.prebuilt.defer_answers``; PostgreSQL only).
        Only for a unit's last statements: a statement SQLAlchemy runs itself is refused
        from here on."""
        if self._deferred is None:
            self._deferred = prebuilt.defer_answers(self.connection)

    def _end_deferred(self, error: BaseException | None, *, commit: bool = False) -> None:
        deferred, self._deferred = self._deferred, None
        if deferred is not None and self._connection is not None:
            prebuilt.end_deferred(self._connection, deferred, error, commit=commit)

    def commit(self) -> None:
        assert self._transaction is not None, "unit of work used outside 'with'"
        # A deferred statement's failure is raised here; the COMMIT went with them.
        self._end_deferred(None, commit=self._given is None)
        self._transaction.commit()

    def rollback(self) -> None:
        assert self._transaction is not None, "unit of work used outside 'with'"
        self._transaction.rollback()


UnitOfWorkFactory = Callable[[], UnitOfWork]


class _NotCommitted(Exception):
    """Why a unit that ends without a commit (and without an error) leaves its deferred
    answers: the transaction rolls back, so their errors do not matter."""
