"""Routing: a merchant's configuration (read, replace, dry run) and the route a new payment
is given at accept (decisions 0076, 0077; contract: design Part 3 "Routing").

* ``RoutingService``: ``GET``/``PUT /v1/routing`` and ``POST /v1/routing/evaluate``.  A
  ``PUT`` is checked for shape before its unit of work opens, then for accounts (the
  merchant's own and enabled) inside it, and stored with a compare-and-set on the version
  (``If-Match``); a refused ``PUT`` writes nothing.
* ``resolve_route``: at accept, in the claim's unit of work on the thread path, before the
  INSERT.  A pinned account is the whole route; a merchant without a configuration routes
  to its default account (no read: ``api_clients`` already said so); otherwise the
  configuration and the merchant's accounts are read, the rule evaluated, and accounts
  disabled since the ``PUT`` or without a method for the payment skipped (recorded).  A
  payment left with no account is refused (400) and nothing is stored.

The one-statement accept (``db.accept_claims``) never gets here: it claims only for a
merchant with neither a default account nor a configuration, whose route is
``["platform"]`` and needs no read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.connector_accounts import ConnectorAccount
from orchestrator.domain.model import ApiClient, PaymentRequest
from orchestrator.domain.preconditions import TagList
from orchestrator.domain.routing import (
    PLATFORM_ACCOUNT,
    SKIP_DISABLED,
    SKIP_NO_PAYMENT_METHOD,
    FieldError,
    InvalidConfiguration,
    PaymentFacts,
    RoutingConfiguration,
    Skip,
    account_errors,
    account_id_of,
    currency_errors,
    evaluate,
    implicit_configuration,
    parse_configuration,
    usable_route,
)
from orchestrator.services.payment_ownership import UnusableConnectorAccount, choose_account

IMPLICIT_VERSION = 0  # the ETag of the implicit configuration: "0"


class RoutingError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RoutingPreconditionFailed(RoutingError):
    pass


class RoutingConflict(RoutingError):
    pass


@dataclass(frozen=True)
class RoutingView:
    """A merchant's configuration as ``GET /v1/routing`` answers it."""

    configuration: RoutingConfiguration
    version: int  # IMPLICIT_VERSION: never sent, the implicit configuration
    updated_at: datetime | None

    @property
    def etag(self) -> str:
        return f'"{self.version}"'

    @property
    def implicit(self) -> bool:
        return self.version == IMPLICIT_VERSION


@dataclass(frozen=True)
class RouteDecision:
    """The route a payment is given: accounts in failover order, the rule (None: the
    default, or a pinned account), the accounts skipped."""

    route: tuple[str, ...]
    rule: str | None
    skipped: tuple[Skip, ...] = ()
    # The provider of the first account (the payment's record names it; the ledger books
    # its money there); None: the platform's own account's.
    provider: str | None = None

    @property
    def connector_account_id(self) -> str | None:
        return account_id_of(self.route[0])

    def document(self) -> dict[str, Any]:
        return {
            "route": list(self.route),
            "rule": self.rule,
            "skipped": [s.document() for s in self.skipped],
        }


def _view(uow: UnitOfWork, client_id: str) -> RoutingView:
    stored = uow.routing.get(client_id)
    if stored is not None:
        return RoutingView(stored.configuration, stored.version, stored.updated_at)
    default = uow.connector_accounts.default_for(client_id)
    return RoutingView(implicit_configuration(default), IMPLICIT_VERSION, None)


def _facts(request: PaymentRequest) -> PaymentFacts:
    return PaymentFacts(
        amount=request.amount,
        currency=request.currency,
        capture_method=request.capture_method,
        off_session=request.off_session,
        metadata=request.metadata,
    )


def _has_method(request: PaymentRequest, entry: str) -> bool:
    return bool(request.payment_method) or entry in request.payment_methods


def _check_payment_methods(request: PaymentRequest, accounts: dict[str, ConnectorAccount]) -> None:
    for account in request.payment_methods:
        if account not in accounts:
            raise UnusableConnectorAccount(
                f"{account} is not one of your connector accounts",
                field=f"payment_methods.{account}",
            )


def _unroutable(decision: RouteDecision) -> UnusableConnectorAccount:
    reasons = ", ".join(f"{s.connector_account} ({s.reason})" for s in decision.skipped)
    return UnusableConnectorAccount(
        f"no account of the route can take this payment: {reasons}. Send a method for "
        "one of them in payment_methods, or change your routing.",
        field="payment_methods"
        if any(s.reason == SKIP_NO_PAYMENT_METHOD for s in decision.skipped)
        else "connector_account",
    )


def resolve_route(
    uow: UnitOfWork, client: ApiClient, request: PaymentRequest, payment_id: str
) -> RouteDecision:
    """The route of a new payment (see the module docstring).  Raises
    ``UnusableConnectorAccount`` (400 naming the field) when the pinned account is not
    usable, ``payment_methods`` names an account that is not the merchant's, or no account
    is left."""
    accounts: dict[str, ConnectorAccount] = {}
    if request.payment_methods or client.routing_version is not None:
        accounts = {a.id: a for a in uow.connector_accounts.list_for_client(client.id)}
        _check_payment_methods(request, accounts)
    if request.connector_account is not None:
        pinned = choose_account(uow, client, request)
        if pinned is not None:
            accounts.setdefault(pinned.id, pinned)
        candidates: tuple[str, ...] = (pinned.id if pinned else PLATFORM_ACCOUNT,)
        rule = None
    elif client.routing_version is None:
        candidates = (client.default_connector_account_id or PLATFORM_ACCOUNT,)
        rule = None
    else:
        stored = uow.routing.get(client.id)
        configuration = (
            stored.configuration
            if stored is not None
            else implicit_configuration(client.default_connector_account_id)
        )
        evaluation = evaluate(configuration, _facts(request), payment_id)
        candidates, rule = evaluation.route, evaluation.rule

    def unusable_reason(entry: str) -> str | None:
        if entry != PLATFORM_ACCOUNT and accounts and not _enabled(accounts, entry):
            return SKIP_DISABLED
        if not _has_method(request, entry):
            return SKIP_NO_PAYMENT_METHOD
        return None

    resolved = usable_route(candidates, unusable_reason)
    decision = RouteDecision(resolved.route, rule, resolved.skipped)
    if not decision.route:
        raise _unroutable(RouteDecision(candidates, rule, resolved.skipped))
    first = decision.connector_account_id
    if first is None:
        return decision
    account = accounts.get(first) or uow.connector_accounts.get(first)
    return replace(decision, provider=None if account is None else account.provider)


def _enabled(accounts: dict[str, ConnectorAccount], entry: str) -> bool:
    account = accounts.get(entry)
    return account is not None and account.enabled


@dataclass(frozen=True)
class RoutingService:
    uow: UnitOfWorkFactory

    def current(self, client_id: str) -> RoutingView:
        with self.uow() as uow:
            return _view(uow, client_id)

    def current_for_ops(self, client_id: str) -> RoutingView | None:
        """Any merchant's (None: no such client)."""
        with self.uow() as uow:
            if uow.clients.get(client_id) is None:
                return None
            return _view(uow, client_id)

    def replace(self, client_id: str, document: Any, *, if_match: TagList | None) -> RoutingView:
        """Raises ``InvalidConfiguration`` (every problem, each naming its field),
        ``RoutingPreconditionFailed`` (stale ``If-Match``) or ``RoutingConflict`` (a
        concurrent ``PUT`` won)."""
        configuration = parse_configuration(document)
        with self.uow() as uow:
            accounts = uow.connector_accounts.list_for_client(client_id)
            errors: list[FieldError] = currency_errors(configuration) + account_errors(
                configuration, {a.id: a.enabled for a in accounts}
            )
            if errors:
                raise InvalidConfiguration(errors)
            current = _view(uow, client_id)
            if if_match is not None and not if_match.matches_strongly(current.etag):
                raise RoutingPreconditionFailed(
                    f"The routing configuration changed since you read it: its etag is "
                    f"{current.etag}, If-Match named another. Read it again and retry; "
                    "nothing changed."
                )
            stored = uow.routing.put(
                client_id,
                configuration,
                expected_version=None if current.implicit else current.version,
                now=uow.now(),
            )
            if stored is None:
                raise RoutingConflict(
                    "The routing configuration was changed concurrently; read it again and retry."
                )
            uow.commit()
        return RoutingView(stored.configuration, stored.version, stored.updated_at)

    def evaluate(
        self, client: ApiClient, request: PaymentRequest, payment_id: str
    ) -> RouteDecision:
        """The route ``request`` would be given now (a dry run: nothing is written)."""
        with self.uow() as uow:
            return resolve_route(uow, client, request, payment_id)
