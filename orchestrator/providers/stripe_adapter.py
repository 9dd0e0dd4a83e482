"""Stripe behind our provider protocol (``base``): ``StripeProvider``, on the official SDK.

It builds its own ``stripe.StripeClient`` (no global API key, base or HTTP client) with
``max_network_retries=0`` (retries are the worker's, at one layer), an HTTP client of its
own on urllib3 with connect and read timeouts (``stripe_http``), and always passes our
derived idempotency key.  Its siblings hold the rest of what is Stripe's:

    stripe_http.py     the urllib3 client the SDK sends through, and its per-thread pools
    stripe_errors.py   SDK exceptions -> our taxonomy (the error tree is drawn there)
    stripe_objects.py  Stripe's objects and webhook events -> ProviderPayment, ProviderRefund,
                       ProviderEvent

Only these four modules import ``stripe`` (the ``stripe-sdk`` import contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import stripe

from orchestrator.providers import keys
from orchestrator.providers.base import (
    ACTION_RESULT_NOT_SUPPORTED,
    ActionResult,
    BalanceMovementPage,
    PaymentOrder,
    PendingCall,
    Permanent,
    ProviderEvent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
)
from orchestrator.providers.stripe_errors import mapped_errors
from orchestrator.providers.stripe_http import Transport, Urllib3Client
from orchestrator.providers.stripe_objects import (
    parse_balance_transaction,
    parse_intent,
    parse_refund,
    parse_webhook_event,
)
from orchestrator.stripe_version import PINNED_API_VERSION

if TYPE_CHECKING:
    from orchestrator.settings import Settings

# Stripe's maximum page size for list endpoints.
LIST_PAGE_LIMIT = 100


class StripeProvider:
    """``PaymentProvider`` on the official SDK.  Thread-safe: one per process is enough."""

    name = "stripe"
    # The customer authenticates at Stripe directly (``client_secret``, Stripe.js): there is
    # no result for us to forward, and we read the intent's outcome instead.
    accepts_action_result = False

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str = stripe.DEFAULT_API_BASE,
        connect_timeout: float,
        read_timeout: float,
        transport: Transport | None = None,
        api_version: str = PINNED_API_VERSION,
        stripe_account: str | None = None,
    ) -> None:
        # The SDK offers telemetry (a request-metrics header, a telemetry id written under
        # ~/.config/stripe, the platform string) only as a module switch; it is one-way and
        # the same for every client in the process, so setting it here is harmless.
        stripe.enable_telemetry = False
        # connect: a refused/unroutable connect proves nothing was sent, so it can be short.
        # read (every wait on the socket after the connect, sending included): too short
        # turns slow successes into unknown outcomes (a query each); too long lets a hung
        # provider eat the worker's lease.  No pool wait: each thread has its own connection.
        self._http_client = Urllib3Client(
            connect_timeout=connect_timeout, read_timeout=read_timeout, transport=transport
        )
        self._client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base},
            http_client=self._http_client,
            max_network_retries=0,
            # Sent as ``Stripe-Version`` on every request: never whatever the SDK or the
            # account default happens to be.
            stripe_version=api_version,
            # A connected account (acct_…) under the platform key: the SDK sends it as
            # ``Stripe-Account`` on every request of this client (connector accounts).
            stripe_account=stripe_account,
        )

    @property
    def sdk(self) -> stripe.StripeClient:
        """The configured SDK client, for tests and diagnostics; the worker uses the
        protocol methods only."""
        return self._client

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        api_key: str | None = None,
        stripe_account: str | None = None,
    ) -> StripeProvider:
        """The platform's account by default; a connector account's ``api_key`` (its own
        account) or ``stripe_account`` (connected to the platform) when given."""
        return cls(
            api_key=api_key or settings.stripe_api_key.get_secret_value(),
            stripe_account=stripe_account,
            api_base=settings.stripe_api_base,
            connect_timeout=settings.provider_connect_timeout_seconds,
            read_timeout=settings.provider_timeout_seconds,
            api_version=settings.stripe_api_version,
        )

    # -- the protocol ------------------------------------------------------------------

    def create_payment(
        self,
        *,
        record_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        description: str | None,
        metadata: dict[str, str],
        capture_method: str = "automatic",
        customer: str | None = None,
        route_attempt: int = 1,
    ) -> ProviderPayment:
        params: dict[str, Any] = {
            "amount": amount,
            "currency": currency.lower(),
            "payment_method": payment_method,
            # Hazard: without this Stripe enables "automatic payment methods", which allow
            # redirects, and a server-side confirm without return_url then fails with 400.
            "payment_method_types": ["card"],
            "confirm": False,
            # Our record id goes last so a merchant key of the same name cannot hide it.
            "metadata": {**metadata, keys.RECORD_ID_METADATA_KEY: record_id},
        }
        if description is not None:
            params["description"] = description
        # Sent only when not Stripe's default, so a create key recorded before these fields
        # existed keeps the same parameters (a different body under a saved key would be a
        # 400 idempotency_error on a resend).
        if capture_method != "automatic":
            params["capture_method"] = capture_method
        if customer is not None:
            params["customer"] = customer
        return self._intent_call(
            "post",
            "/v1/payment_intents",
            params,
            idempotency_key=keys.create_key(record_id, route_attempt),
        )

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
        # Stripe has had the order since the create; only its attempt number is read here.
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        params: dict[str, Any] = {}
        if off_session is not None:
            params["off_session"] = off_session
        if return_url is not None:
            params["return_url"] = return_url
        return self._intent_call(
            "post",
            f"/v1/payment_intents/{quote(provider_payment_id, safe='')}/confirm",
            params,
            idempotency_key=keys.confirm_key(
                record_id, attempt, order.route_attempt if order is not None else 1
            ),
        )

    def _intent_call(
        self, method: str, path: str, params: dict[str, Any], *, idempotency_key: str | None
    ) -> ProviderPayment:
        """One call answered by a PaymentIntent, through ``raw_request``: the typed call's
        requestor, headers, form encoding (the same body under the same key) and error
        mapping, but the answer stays plain JSON.  The typed call built a StripeObject tree
        per answer and ``parse_intent`` turned it back into a dict: a noticeable share of a
        payment's worker CPU for its create and confirm, spent on objects thrown away."""
        options = {} if idempotency_key is None else {"idempotency_key": idempotency_key}
        with mapped_errors():
            response = self._client.raw_request(method, path, **params, **options)
        return parse_intent(response.data if isinstance(response.data, Mapping) else {})

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        params: dict[str, Any] = {}
        if amount_to_capture is not None:
            params["amount_to_capture"] = amount_to_capture
        with mapped_errors():
            intent = self._client.v1.payment_intents.capture(
                provider_payment_id,
                params,  # type: ignore[arg-type]
                {"idempotency_key": keys.capture_key(operation_id, attempt)},
            )
        return parse_intent(intent)

    def cancel_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        reason: str | None,
        order: PaymentOrder | None = None,  # Stripe cancels the intent itself
    ) -> ProviderPayment:
        params: dict[str, Any] = {}
        if reason is not None:
            params["cancellation_reason"] = reason
        with mapped_errors():
            intent = self._client.v1.payment_intents.cancel(
                provider_payment_id,
                params,  # type: ignore[arg-type]
                {"idempotency_key": keys.cancel_key(operation_id, attempt)},
            )
        return parse_intent(intent)

    def create_refund(
        self,
        *,
        provider_payment_id: str,
        operation_id: str,
        attempt: int,
        amount: int,
        reason: str | None,
        metadata: dict[str, str],
    ) -> ProviderRefund:
        params: dict[str, Any] = {
            "payment_intent": provider_payment_id,
            "amount": amount,
            # Our refund id goes last so a merchant key of the same name cannot hide it: the
            # lookup after an unknown outcome recognises our refund by it.
            "metadata": {**metadata, keys.REFUND_ID_METADATA_KEY: operation_id},
        }
        if reason is not None:
            params["reason"] = reason
        with mapped_errors():
            refund = self._client.v1.refunds.create(
                params,  # type: ignore[arg-type]
                {"idempotency_key": keys.refund_key(operation_id, attempt)},
            )
        return parse_refund(refund)

    def retrieve_refund(
        self,
        refund_id: str,
        *,
        pending: PendingCall | None = None,  # Stripe's read is strongly consistent
    ) -> ProviderRefund:
        with mapped_errors():
            refund = self._client.v1.refunds.retrieve(refund_id)
        return parse_refund(refund)

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        """One page of ``GET /v1/refunds?payment_intent=…`` (newest first, strongly
        consistent)."""
        params: dict[str, Any] = {
            "payment_intent": provider_payment_id,
            "limit": min(max(limit, 1), LIST_PAGE_LIMIT),
        }
        if starting_after is not None:
            params["starting_after"] = starting_after
        with mapped_errors():
            page = self._client.v1.refunds.list(params)  # type: ignore[arg-type]
        return RefundPage(
            refunds=tuple(parse_refund(r) for r in page.data), has_more=bool(page.has_more)
        )

    def list_refunds_created(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> RefundPage:
        """One page of ``GET /v1/refunds?created[gte]=…&created[lte]=…`` (every refund of the
        account created in the window, newest first, strongly consistent): reconciliation's
        source of refunds, including those made in the Dashboard."""
        params: dict[str, Any] = {
            "created": {"gte": created_gte, "lte": created_lte},
            "limit": min(max(limit, 1), LIST_PAGE_LIMIT),
        }
        if starting_after is not None:
            params["starting_after"] = starting_after
        with mapped_errors():
            # Plain JSON, like list_payments: a page is only scanned.
            response = self._client.raw_request("get", "/v1/refunds", **params)
        raw = response.data if isinstance(response.data, Mapping) else {}
        listed = raw.get("data")
        return RefundPage(
            refunds=tuple(parse_refund(r) for r in listed) if isinstance(listed, list) else (),
            has_more=bool(raw.get("has_more")),
        )

    def list_balance_movements(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> BalanceMovementPage:
        """One page of ``GET /v1/balance_transactions?created[gte]=…&created[lte]=…`` (the
        account's balance, newest first, strongly consistent): reconciliation's source of
        the money that actually moved (decision 0108)."""
        params: dict[str, Any] = {
            "created": {"gte": created_gte, "lte": created_lte},
            "limit": min(max(limit, 1), LIST_PAGE_LIMIT),
            # The source's metadata is where our reference is: without it a movement of a
            # charge no row of ours holds could not be told ours (an orphan) from another
            # integration's (foreign) without a read per movement.
            "expand": ["data.source"],
        }
        if starting_after is not None:
            params["starting_after"] = starting_after
        with mapped_errors():
            # Plain JSON, like list_payments: a page is only scanned.
            response = self._client.raw_request("get", "/v1/balance_transactions", **params)
        raw = response.data if isinstance(response.data, Mapping) else {}
        listed = raw.get("data")
        return BalanceMovementPage(
            movements=(
                tuple(parse_balance_transaction(t) for t in listed)
                if isinstance(listed, list)
                else ()
            ),
            has_more=bool(raw.get("has_more")),
        )

    def parse_webhook_event(
        self, payload: bytes, signature_header: str, secret: str
    ) -> ProviderEvent:
        """See the module-level ``parse_webhook_event``."""
        return parse_webhook_event(payload, signature_header, secret)

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: PaymentOrder | None = None,  # Stripe reads the intent itself: no replay
        confirm_attempt: int = 0,
        unknown_outcomes: int = 0,  # a strongly consistent read needs no other way
        pending: PendingCall | None = None,  # strongly consistent: a call's effect shows
        action_result: ActionResult | None = None,
    ) -> ProviderPayment:
        return self._intent_call(
            "get",
            f"/v1/payment_intents/{quote(provider_payment_id, safe='')}",
            {},
            idempotency_key=None,
        )

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """Stripe takes no forwarded result (``accepts_action_result``): nothing is sent."""
        raise Permanent(
            "Stripe takes no forwarded authentication result: the customer authenticates "
            "at Stripe with the client_secret",
            code=ACTION_RESULT_NOT_SUPPORTED,
        )

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        """One page of ``GET /v1/payment_intents`` (newest first, strongly consistent)."""
        params: dict[str, Any] = {
            "created": {"gte": created_gte, "lte": created_lte},
            "limit": min(max(limit, 1), LIST_PAGE_LIMIT),
        }
        if starting_after is not None:
            params["starting_after"] = starting_after
        with mapped_errors():
            # raw_request: same requestor, headers, version and error mapping as the typed
            # call, but the answer stays plain JSON.  The typed call builds a StripeObject
            # tree per intent, costly enough that a busy account's lookup spent most of its
            # time converting pages it only scans.
            response = self._client.raw_request("get", "/v1/payment_intents", **params)
        raw = response.data if isinstance(response.data, Mapping) else {}
        listed = raw.get("data")
        return ProviderPaymentPage(
            provider_payments=(
                tuple(parse_intent(i) for i in listed) if isinstance(listed, list) else ()
            ),
            has_more=bool(raw.get("has_more")),
        )

    def close(self) -> None:
        self._http_client.close()

    def __enter__(self) -> StripeProvider:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
