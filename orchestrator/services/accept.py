"""Accepting a payment: the first transaction of the protocol.

One statement claims the (client, Idempotency-Key) pair with
``INSERT … ON CONFLICT DO NOTHING`` and commits an IN_PROGRESS record holding a short
dispatch lease; the 202 means that commit.  Then a worker is woken:

* ``PAYORCH_WAKE_UP=notify`` (PostgreSQL's default): the same statement sends a NOTIFY,
  which PostgreSQL delivers only on commit; the dispatcher (orchestrator.engine.dispatcher)
  publishes the task.  The request never waits for the broker.
* ``publish`` (SQLite): the task is published here, after the commit.

A lost wake-up (no listener, a failed publish) still answers 202: the record is durable,
and when the dispatch lease expires the sweeper re-queues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from orchestrator import metrics
from orchestrator.db.uow import UnitOfWork, UnitOfWorkFactory
from orchestrator.domain.encoding import encode_representation
from orchestrator.domain.ids import new_payment_id
from orchestrator.domain.method_ownership import ForeignPaymentMethod
from orchestrator.domain.model import ApiClient, PaymentRecord, PaymentRequest, Role
from orchestrator.domain.payment_representation import payment_representation
from orchestrator.domain.states import INITIAL
from orchestrator.engine.publisher import PublishFailed, TaskPublisher
from orchestrator.logging import get_logger, key_digest
from orchestrator.services.api_keys import active_found, hash_key, plausible_key
from orchestrator.services.idempotency import (
    IdempotencyKeyReused,
    claim_key,
    require_same_request,
)
from orchestrator.services.payment_ownership import (
    UnusableConnectorAccount,
    claim_ownership,
)
from orchestrator.services.routing import RouteDecision, resolve_route
from orchestrator.settings import Settings
from orchestrator.tracing import current_traceparent, tag_idempotency_key

log = get_logger(__name__)

DISPATCH_OWNER = "dispatch"
INITIAL_LEASE_TOKEN = 1


__all__ = [
    "Accepted",
    "AuthenticatedClaim",
    "IdempotencyKeyReused",
    "KeyedAccept",
    "KeyedClaim",
    "accept_payment",
    "authenticate_and_accept",
    "claim_payment",
    "keyed_claim",
    "new_payment",
]


@dataclass(frozen=True)
class Accepted:
    record: PaymentRecord
    replayed: bool


def accept_payment(
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    client: ApiClient,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
) -> Accepted:
    """``uow``: single-statement units (``Container.statement_uow``; one statement per
    step, no BEGIN/COMMIT).  Raises IdempotencyKeyReused when the key names a different
    request."""
    accepted = claim_payment(uow, settings, client, idempotency_key, request, fingerprint)
    if not accepted.replayed and settings.wake_up_mode == "publish":
        publish_wake_up(publisher, accepted.record)
    return accepted


def claim_payment(
    uow: UnitOfWorkFactory,
    settings: Settings,
    client: ApiClient,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
) -> Accepted:
    """The claim on the units of work ``uow`` makes, and the replay's checks; no broker
    (``accept_payment`` publishes in ``publish`` mode).  Raises IdempotencyKeyReused."""
    notify = settings.wake_up_mode == "notify"
    claimed = claim_key(
        uow,
        insert=lambda unit, now: _insert(
            unit, now, settings, client, idempotency_key, request, fingerprint, notify
        ),
        find=lambda unit: unit.payments.find_by_key(client.id, idempotency_key),
    )
    record = claimed.record
    if not claimed.created:
        return replay_existing(record, settings, client, idempotency_key, fingerprint)
    _count_accepted(record, client, settings, idempotency_key)
    return Accepted(record, replayed=False)


def replay_existing(
    record: PaymentRecord,
    settings: Settings,
    client: ApiClient,
    idempotency_key: str,
    fingerprint: str,
) -> Accepted:
    """The record that holds the key, answered as a replay; IdempotencyKeyReused when it
    was claimed by another request."""
    key_tag = key_digest(settings.secret_key.get_secret_value(), idempotency_key)
    require_same_request(
        record, record.request_fingerprint, fingerprint, client_id=client.id, key_tag=key_tag
    )
    metrics.REPLAYS_ANSWERED.labels(state=record.status.value).inc()
    return Accepted(record, replayed=True)


class AuthenticatedClaim(Protocol):
    """The authentication's read and the claim in one step (PostgreSQL:
    orchestrator.db.accept_claims.AuthenticatedClaim)."""

    def now(self) -> datetime:
        """The database clock, as a unit of work reads it."""

    def __call__(
        self, key_hash: str, values: dict[str, Any], notify: bool
    ) -> tuple[tuple[ApiClient, str] | None, bool]:
        """The client found by ``key_hash`` with its stored hash (None: no such key), and
        whether the payment was inserted: only for an active merchant whose key was free."""


class AuthenticatedClaimOnLoop(Protocol):
    """``AuthenticatedClaim`` on the API's event loop (PostgreSQL with ``WAKE_UP=notify``:
    orchestrator.db.accept_claims.LoopAuthenticatedClaim, built by the composition root).
    Every answer may be None: no connection or no fresh clock sample in time, and the
    request takes the thread path."""

    def now(self) -> datetime | None:
        """The database clock when it needs no round trip."""

    async def __call__(
        self, key_hash: str, values: dict[str, Any], notify: bool
    ) -> tuple[tuple[ApiClient, str] | None, bool] | None:
        """As ``AuthenticatedClaim.__call__``."""

    async def find_by_key(self, client_id: str, idempotency_key: str) -> PaymentRecord | None:
        """The record holding a taken key, for its replay."""

    async def close(self) -> None:
        """Close its connections (the API's lifespan, at shutdown)."""


@dataclass(frozen=True)
class KeyedAccept:
    """``client``: None when the API key is unknown or revoked (401).  ``accepted``: None
    when the client may not create payments (403)."""

    client: ApiClient | None
    accepted: Accepted | None


@dataclass(frozen=True)
class KeyedClaim:
    """A new payment's claim, built before its client is known: the API key's hash, the
    record and its row's values (``client_id`` comes from the client's row)."""

    key_hash: str
    idempotency_key: str
    record: PaymentRecord
    values: dict[str, Any]
    notify: bool


def keyed_claim(
    now: datetime,
    settings: Settings,
    api_key: str,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
) -> KeyedClaim | None:
    """None: the key cannot be one of ours (401 without a round trip)."""
    if not plausible_key(api_key):
        return None
    record, values = _claim(now, settings, "", idempotency_key, request, fingerprint)
    notify = settings.wake_up_mode == "notify"
    return KeyedClaim(hash_key(api_key), idempotency_key, record, values, notify)


def new_payment(
    claim: KeyedClaim, client: ApiClient, settings: Settings, publisher: TaskPublisher
) -> Accepted:
    """The claim inserted for ``client``: counted, logged, and in ``publish`` mode woken."""
    record = replace(claim.record, client_id=client.id)
    _count_accepted(record, client, settings, claim.idempotency_key)
    if settings.wake_up_mode == "publish":
        publish_wake_up(publisher, record)
    return Accepted(record, replayed=False)


def authenticate_and_accept(
    claim: AuthenticatedClaim,
    uow: UnitOfWorkFactory,
    publisher: TaskPublisher,
    settings: Settings,
    api_key: str,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
    *,
    authenticated: Callable[[ApiClient], None] = lambda _client: None,
) -> KeyedAccept:
    """``authenticate`` and ``accept_payment`` with one round trip for a new key: the
    claim is built before the client is known, and the statement inserts it only for an
    active merchant.  A taken key goes the way of ``accept_payment`` (the replay and its
    checks); nothing differs but the round trips.  ``authenticated`` is told the client
    as soon as it is known (the request's logs name it, a 422 or 403 included).  Raises
    IdempotencyKeyReused."""
    prepared = keyed_claim(claim.now(), settings, api_key, idempotency_key, request, fingerprint)
    if prepared is None:
        return KeyedAccept(None, None)
    found, inserted = claim(prepared.key_hash, prepared.values, prepared.notify)
    client = active_found(found, prepared.key_hash)
    if client is not None:
        authenticated(client)
    if client is None or client.role is not Role.MERCHANT:
        return KeyedAccept(client, None)
    if not inserted:
        # The key is taken, or the merchant has a default connector account (the statement
        # inserts only for one without): read its record; none, claim it as
        # accept_payment does.
        with uow() as unit:
            existing = unit.payments.find_by_key(client.id, idempotency_key)
        if existing is not None:
            return KeyedAccept(
                client, replay_existing(existing, settings, client, idempotency_key, fingerprint)
            )
        # Gone meanwhile (retention purged its key): claim it anew, as accept_payment does.
        accepted = accept_payment(
            uow, publisher, settings, client, idempotency_key, request, fingerprint
        )
        return KeyedAccept(client, accepted)
    return KeyedAccept(client, new_payment(prepared, client, settings, publisher))


def _count_accepted(
    record: PaymentRecord, client: ApiClient, settings: Settings, idempotency_key: str
) -> None:
    metrics.PAYMENTS_ACCEPTED.inc()
    key_tag = key_digest(settings.secret_key.get_secret_value(), idempotency_key)
    tag_idempotency_key(key_tag)
    log.info("payment_accepted", payment_id=record.id, client_id=client.id, key_hmac=key_tag)


def publish_wake_up(publisher: TaskPublisher, record: PaymentRecord) -> None:
    """``publish`` mode: the task, after the commit."""
    try:
        # The request's span is the payment's trace context (stored in its row as well).
        publisher.publish_process_payment(
            record.id, record.lease_token, traceparent=current_traceparent()
        )
    except PublishFailed as error:
        # The answer is still 202: the commit above is the promise, the message only a
        # wake-up.  The dispatch lease expires into the sweeper's hands.
        metrics.PUBLISH_FAILURES.inc()
        log.warning("task_publish_failed", payment_id=record.id, error=str(error))


def _insert(
    uow: UnitOfWork,
    now: datetime,
    settings: Settings,
    client: ApiClient,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
    notify: bool,
) -> PaymentRecord | None:
    payment_id = new_payment_id()
    try:
        # Before the INSERT: a refusal (another merchant's customer or method, an account
        # that is not the merchant's or is disabled, no account of the route usable)
        # stores no payment.
        decision = resolve_route(uow, client, request, payment_id)
        claim_ownership(uow, client, request)
    except (UnusableConnectorAccount, ForeignPaymentMethod):
        if uow.payments.find_by_key(client.id, idempotency_key) is not None:
            return None  # a retry of an accepted payment: its replay, not the refusal
        raise
    record, values = _claim(
        now, settings, client.id, idempotency_key, request, fingerprint, decision, payment_id
    )
    if not uow.payments.insert_if_absent(values, wake=notify):
        return None
    return record


def _claim(
    now: datetime,
    settings: Settings,
    client_id: str,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
    decision: RouteDecision | None = None,
    payment_id: str | None = None,
) -> tuple[PaymentRecord, dict[str, Any]]:
    """The new record and the claim's values for its row.  ``decision``: the thread
    path's route (``routing.resolve_route``), whose first account the payment runs on and
    whose provider the record names; the fast paths store no route and a NULL account
    (the platform's own), and their statement inserts only for a merchant without a
    default account or a routing configuration (its route is ``["platform"]``, shown so by
    ``payment_representation.shown_route``)."""
    values = _new_record_values(client_id, idempotency_key, request, fingerprint, payment_id)
    if decision is not None:
        values["connector_account_id"] = decision.connector_account_id
        if decision.provider is not None:
            values["provider"] = decision.provider
        values["route"] = list(decision.route)
        values["route_rule"] = decision.rule
        values["route_skipped"] = [s.document() for s in decision.skipped] or None
    if request.payment_methods:
        values["payment_methods"] = dict(request.payment_methods)
    traceparent = current_traceparent()
    if traceparent is not None:
        # The request's span: the worker's spans join it, whoever wakes the worker
        # (decision 0102).  Not named while traces are off: the statement stays the same.
        values["traceparent"] = traceparent
    values.update(
        created_at=now,
        updated_at=now,
        locked_until=now + timedelta(seconds=settings.dispatch_lease_seconds),
    )
    record = _new_record(values, request)
    # The 202 body, encoded once and stored with the claim: every replay while the payment
    # is unfinished returns these bytes, whatever the workers changed meanwhile (the
    # merchant polls the payment's URL for its current state).
    body = encode_representation(payment_representation(record))
    values["accepted_response"] = body.decode("utf-8")
    # The row holds exactly these values (the statement returns only its id).
    return replace(record, accepted_response=body), values


def _new_record_values(
    client_id: str,
    idempotency_key: str,
    request: PaymentRequest,
    fingerprint: str,
    payment_id: str | None = None,
) -> dict[str, Any]:
    return {
        "id": payment_id or new_payment_id(),
        "client_id": client_id,
        "idempotency_key": idempotency_key,
        "request_fingerprint": fingerprint,
        "amount": request.amount,
        "currency": request.currency,
        "payment_method": request.payment_method,
        "customer_reference": request.customer_reference,
        "description": request.description,
        "metadata": dict(request.metadata),
        "customer": request.customer,
        "off_session": request.off_session,
        "return_url": request.return_url,
        "capture_method": request.capture_method,
        "status": INITIAL.status.value,
        "recovery_point": INITIAL.point.value,
        "lease_token": INITIAL_LEASE_TOKEN,
        "lease_owner": DISPATCH_OWNER,
        "next_attempt_at": None,
        "attempts": 0,
        "unknown_outcomes": 0,
        "confirm_attempts": 0,
        # The provider of the platform's own account; a payment on a connector account
        # names that account's provider instead (``_claim``).
        "provider": "stripe",
    }


def _new_record(values: dict[str, Any], request: PaymentRequest) -> PaymentRecord:
    """The record as the claim stores it."""
    return PaymentRecord(
        id=values["id"],
        client_id=values["client_id"],
        idempotency_key=values["idempotency_key"],
        request_fingerprint=values["request_fingerprint"],
        request=request,
        status=INITIAL.status,
        recovery_point=INITIAL.point,
        lease_token=values["lease_token"],
        lease_owner=values["lease_owner"],
        locked_until=values["locked_until"],
        next_attempt_at=None,
        attempts=values["attempts"],
        unknown_outcomes=0,
        confirm_attempts=0,
        provider=values["provider"],
        provider_payment_id=None,
        provider_charge_id=None,
        provider_outcome=None,
        failure=None,
        last_error=None,
        response_body=None,
        created_at=values["created_at"],
        updated_at=values["updated_at"],
        completed_at=None,
        connector_account_id=values.get("connector_account_id"),
        route=tuple(values.get("route") or ()),
        route_rule=values.get("route_rule"),
        route_skipped=tuple(values.get("route_skipped") or ()),
    )
