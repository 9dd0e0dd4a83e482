"""Plain records the repositories return; no ORM object leaves the db package."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from orchestrator.domain.states import Outcome, PaymentStatus, RecoveryPoint, State, WaitingFor


class Role(StrEnum):
    MERCHANT = "merchant"
    OPS = "ops"


@dataclass(frozen=True)
class ApiClient:
    id: str
    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None = None
    # The connector account a payment naming none runs on (decision 0062); None: the
    # platform's own account.
    default_connector_account_id: str | None = None
    # The version of its routing configuration (decision 0076); None: it never sent one
    # (its payments route to the default account, on the accept's one-statement path).
    routing_version: int | None = None


@dataclass(frozen=True)
class ApiKey:
    """One of a client's keys, as stored: its first characters, never the key."""

    id: str
    client_id: str
    key_prefix: str
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class PaymentRequest:
    """A validated ``POST /v1/payments`` body (currency already lower-case)."""

    amount: int
    currency: str
    payment_method: str
    customer_reference: str | None = None
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    # The provider's customer (``cus_…``): saved cards need it on the provider payment.
    customer: str | None = None
    # True: a merchant-initiated charge, no customer present (a card that would need
    # authentication fails with authentication_required).  None: not said (Part 1 payments).
    off_session: bool | None = None
    # Where a redirect-based authentication sends the customer back.
    return_url: str | None = None
    # ``manual``: a successful confirm only authorises (``requires_capture``); a capture
    # operation takes the money later.
    capture_method: str = "automatic"
    # The connector account the request pins (``ca_…``); None: the merchant's default.
    connector_account: str | None = None
    # ``{"ca_…": <that provider's own method>}``: the method used with each account of the
    # route (decision 0077); an account not named uses ``payment_method``.
    payment_methods: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    code: str
    message: str
    decline_code: str | None = None
    # Whose problem it is, from the adapter's decline table (decision 0087): "card" or
    # "provider" (another account may succeed); None: the adapter did not say.  Not stored:
    # it is read once, when the engine decides between failing and failing over.
    kind: str | None = None


@dataclass(frozen=True)
class PaymentRecord:
    id: str
    client_id: str
    idempotency_key: str | None
    request_fingerprint: str | None
    request: PaymentRequest
    status: PaymentStatus
    recovery_point: RecoveryPoint
    lease_token: int
    lease_owner: str | None
    locked_until: datetime | None
    next_attempt_at: datetime | None
    attempts: int
    unknown_outcomes: int
    confirm_attempts: int
    provider: str
    provider_payment_id: str | None
    provider_charge_id: str | None
    provider_outcome: Outcome | None
    failure: Failure | None
    last_error: str | None
    response_body: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    # The lookup after a create whose outcome is unknown: create attempts bound its window,
    # ``lookup_pending`` says a scan is owed, the cursor says where it resumes.
    first_create_at: datetime | None = None
    last_create_at: datetime | None = None
    lookup_pending: bool = False
    lookup_cursor: str | None = None
    lookup_pages: int = 0
    # Provider payments that named this record but did not match it: never confirmed, shown to ops.
    rejected_intents: tuple[dict[str, Any], ...] = ()
    # What the provider said it moved when the payment settled (the ledger books this).
    settled_amount: int | None = None
    settled_currency: str | None = None
    # The answers of record, exactly as first sent (encode_representation): the 202 body of
    # the accept, and the 200 body written by the finishing transaction.  Replays serve these
    # bytes.  None for rows older than migration 0003 and after retention purged them.
    accepted_response: bytes | None = None
    final_response: bytes | None = None
    # A waiting operation (no lease held; next_attempt_at is its re-check time).
    waiting_for: WaitingFor | None = None
    waiting_since: datetime | None = None
    # Only while waiting for the customer: what they must do, and the provider's client
    # secret for the merchant's front end (it can confirm the provider payment: never logged).
    next_action: dict[str, Any] | None = None
    client_secret: str | None = field(default=None, repr=False)
    # A provider event arrived while a worker held the lease (its wait then ends at once).
    woken_at: datetime | None = None
    # Money after the charge (migration 0007): captured; held by refunds not failed (never
    # more than captured); returned by succeeded refunds.
    amount_captured: int = 0
    amount_refund_reserved: int = 0
    amount_refunded: int = 0
    # The highest ``sequence`` of the payment's merchant events (0: none yet).  Not a column:
    # read with the payment (``PaymentRepository``) from the outbox, whose retention always
    # keeps a payment's newest event, so it never goes back.
    latest_event_sequence: int = 0
    # Manual capture (migration 0013): what a capture may still take (requires_capture).
    amount_capturable: int = 0
    # The connector account it runs on (migration 0018), set at accept; None: the
    # platform's own account.  Its refunds, captures and cancels use the same.
    connector_account_id: str | None = None
    # The customer's authentication result forwarded through us (decision 0073): the last
    # body the merchant sent, its forward's number n (key payorch-{id}-details-{n}), and
    # whether the provider has not answered it yet (the worker sends it, or replays it).
    action_result: dict[str, Any] | None = field(default=None, repr=False)
    action_result_attempts: int = 0
    action_result_pending: bool = False

    # The route resolved at accept (decision 0077): accounts in failover order
    # (``domain.routing.PLATFORM_ACCOUNT`` for the platform's), the rule that chose it
    # (None: the default), the accounts skipped and why.  ``route`` empty: stored before
    # routing existed, or by the one-statement accept (``shown_route``).
    route: tuple[str, ...] = ()
    route_rule: str | None = None
    route_skipped: tuple[dict[str, str], ...] = ()
    # Failover (decision 0086): how many times the payment moved to the next account of its
    # route (its current attempt is ``failovers + 1``; the keys forwarded for it carry that
    # number), and the attempts that ended, oldest first, as the representation shows them.
    failovers: int = 0
    route_attempts: tuple[dict[str, Any], ...] = ()

    @property
    def payment_method_for_account(self) -> str | dict[str, Any]:
        """The method to send to the account the payment runs on: the request's entry for
        it in ``payment_methods``, else ``payment_method``."""
        account = self.connector_account_id
        if account is not None and account in self.request.payment_methods:
            method: str | dict[str, Any] = self.request.payment_methods[account]
            return method
        return self.request.payment_method

    @property
    def token_method_for_account(self) -> str:
        """``payment_method_for_account`` where a call takes a method id (a string): an
        object-shaped method (a provider that takes one reads it from the order) falls
        back to ``payment_method``."""
        method = self.payment_method_for_account
        return method if isinstance(method, str) else self.request.payment_method

    @property
    def state(self) -> State:
        return State(self.status, self.recovery_point)

    @property
    def requires_action(self) -> bool:
        """Waiting for the customer to authenticate: shown as ``requires_action``."""
        return self.status is PaymentStatus.PROCESSING and self.waiting_for is WaitingFor.CUSTOMER


@dataclass(frozen=True)
class AuditEntry:
    id: int
    actor_client_id: str
    actor_name: str
    action: str
    payment_id: str
    reason: str
    old_token: int | None
    new_token: int | None
    created_at: datetime
    # The operation acted on (a refund's rfd_…); None: the payment's charge.
    operation_id: str | None = None
