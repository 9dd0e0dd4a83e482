"""What operators read of routing: each merchant's configuration and its recent decisions
(the payments with the route each was given).  The console's routing pages call these."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.db.repositories.routing import RoutingDecision
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.model import ApiClient, Role
from orchestrator.domain.routing import RoutingConfiguration, implicit_configuration

RECENT_DECISIONS = 50


@dataclass(frozen=True)
class MerchantRouting:
    client: ApiClient
    configuration: RoutingConfiguration
    # None: never sent; the implicit configuration (its default account, else platform).
    version: int | None


@dataclass(frozen=True)
class MerchantRoutingDetail:
    routing: MerchantRouting
    decisions: list[RoutingDecision]


def _routing_of(unit: UnitOfWork, client: ApiClient) -> MerchantRouting:
    stored = unit.routing.get(client.id) if client.routing_version is not None else None
    if stored is None:
        return MerchantRouting(
            client, implicit_configuration(client.default_connector_account_id), None
        )
    return MerchantRouting(client, stored.configuration, stored.version)


def merchant_routings(uow: UnitOfWorkFactory) -> list[MerchantRouting]:
    """Every merchant's configuration, in the clients' order."""
    with uow() as unit:
        merchants = [c for c in unit.clients.list() if c.role is Role.MERCHANT]
        return [_routing_of(unit, client) for client in merchants]


def merchant_routing(uow: UnitOfWorkFactory, client_id: str) -> MerchantRoutingDetail | None:
    """One merchant's configuration and newest decisions; None: no such merchant."""
    with uow() as unit:
        client = unit.clients.get(client_id)
        if client is None or client.role is not Role.MERCHANT:
            return None
        return MerchantRoutingDetail(
            _routing_of(unit, client),
            unit.routing.recent_decisions(client_id, limit=RECENT_DECISIONS),
        )
