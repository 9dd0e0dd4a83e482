"""Reads behind the API (scoped to the calling client).  They only read: the composition
root hands them a read-only unit of work (``Container.read_only_uow``).

``list_client_payments`` is the merchant's list (``GET /v1/payments``, decision 0089):
newest first, paged by keyset from a payment id (``starting_after``, ``ending_before``).
``fetch_page`` is the paging both it and the operator's list
(``orchestrator.ops.payment_reads``) use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from orchestrator.db.repositories.payment_search import PaymentSearchRepository
from orchestrator.db.uow import UnitOfWorkFactory
from orchestrator.domain.ids import is_payment_id
from orchestrator.domain.model import ApiClient, PaymentRecord
from orchestrator.domain.payment_filters import PaymentFilters

DEFAULT_CLIENT_PAGE_SIZE = 10
MAX_CLIENT_PAGE_SIZE = 100


def get_payment(
    read_only_uow: UnitOfWorkFactory, client: ApiClient, payment_id: str
) -> PaymentRecord | None:
    with read_only_uow() as uow:
        return uow.payments.get_for_client(client.id, payment_id)


def find_payment_by_key(
    read_only_uow: UnitOfWorkFactory, client: ApiClient, idempotency_key: str
) -> PaymentRecord | None:
    with read_only_uow() as uow:
        return uow.payments.find_by_key(client.id, idempotency_key)


@dataclass(frozen=True)
class Page:
    records: list[PaymentRecord]  # newest first
    has_more: bool  # more rows past this page, in the direction it was read


def fetch_page(
    search: PaymentSearchRepository,
    filters: PaymentFilters,
    *,
    limit: int,
    before: tuple[datetime, str] | None = None,
    after: tuple[datetime, str] | None = None,
) -> Page:
    """``limit`` rows older than ``before`` (or, with ``after``, the ``limit`` rows just
    newer than it), newest first.  One row more than asked tells whether there is more
    without a COUNT, which would read every matching row."""
    records = search.search(filters, limit=limit + 1, before=before, after=after)
    has_more = len(records) > limit
    records = records[:limit]
    if after is not None:
        records.reverse()  # read nearest first; shown newest first like every page
    return Page(records=records, has_more=has_more)


@dataclass(frozen=True)
class ClientPaymentQuery:
    filters: PaymentFilters  # without client_id: the client's own is always added
    limit: int = DEFAULT_CLIENT_PAGE_SIZE
    starting_after: str | None = None  # a payment id: the page of payments older than it
    ending_before: str | None = None  # a payment id: the page of payments newer than it


class UnknownPosition(Exception):
    """``starting_after`` or ``ending_before`` names no payment of this client.  Another
    client's payment gets the same answer as one that does not exist."""

    def __init__(self, parameter: str) -> None:
        super().__init__(parameter)
        self.parameter = parameter


def list_client_payments(
    read_only_uow: UnitOfWorkFactory, client: ApiClient, query: ClientPaymentQuery
) -> Page:
    """The client's payments, newest first, ``query.limit`` at most.  Never another
    client's: the client id is added here to whatever filter was asked for."""
    filters = replace(query.filters, client_id=client.id)
    with read_only_uow() as uow:
        before = after = None
        if query.starting_after is not None:
            before = _position(uow.payments.get_for_client, client, query.starting_after)
            if before is None:
                raise UnknownPosition("starting_after")
        elif query.ending_before is not None:
            after = _position(uow.payments.get_for_client, client, query.ending_before)
            if after is None:
                raise UnknownPosition("ending_before")
        return fetch_page(uow.search, filters, limit=query.limit, before=before, after=after)


def _position(
    get_for_client: Callable[[str, str], PaymentRecord | None], client: ApiClient, payment_id: str
) -> tuple[datetime, str] | None:
    # An id that cannot exist costs no query.
    record = get_for_client(client.id, payment_id) if is_payment_id(payment_id) else None
    return None if record is None else (record.created_at, record.id)
