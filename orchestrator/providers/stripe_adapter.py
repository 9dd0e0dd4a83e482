"""Stripe behind our provider protocol.  The only module in payorch that imports ``stripe``.

It builds its own ``stripe.StripeClient`` (no global API key, base or HTTP client) with
``max_network_retries=0`` (retries are the worker's, at one layer), an HTTP client of its
own on urllib3 with connect and read timeouts (``_Urllib3Client``), and always passes our
derived idempotency key.

How SDK failures become our taxonomy (``base``)::

    stripe.StripeError
    ├── CardError (402)                        -> Declined(code, decline_code, provider_payment_id)
    ├── IdempotencyError (400 idempotency_error) -> Permanent(code="idempotency_error")
    ├── InvalidRequestError (400, 404)         -> Permanent(code)   e.g. resource_missing,
    │                                             payment_intent_unexpected_state (the worker
    │                                             answers that one by querying the intent;
    │                                             also a capture of a non-capturable intent
    │                                             and a cancel after success), and for
    │                                             refunds amount_too_large (more than is
    │                                             left) and charge_already_refunded
    ├── AuthenticationError (401)              -> Permanent
    ├── PermissionError (403)                  -> Permanent
    ├── RateLimitError (429)                   -> Retryable(retry_after = Retry-After header;
    │                                             the SDK ignores it, so we read e.headers)
    ├── APIError
    │   ├── 409 idempotency_key_in_use         -> Retryable (arrives as a plain APIError: the
    │   │                                         code is only in e.error.code)
    │   ├── 5xx, or a body that is not JSON    -> OutcomeUnknown (Stripe may have acted)
    │   └── any other 4xx                      -> Permanent
    └── APIConnectionError
        ├── caused by a transport failure      -> OutcomeUnknown (timeout, refused, reset,
        │                                         a body damaged in transit, …)
        └── caused by anything else            -> ProviderBug (NOT a ProviderError), e.g.
                                                  a malformed api_base (nothing was sent)

    anything else raised inside the HTTP stack -> propagates unchanged

    then, when the answer carries ``Stripe-Should-Retry`` (see ``map_stripe_error``):
    true  -> Retryable            false -> a Retryable becomes OutcomeUnknown

Webhooks go the other way: ``parse_webhook_event`` verifies ``Stripe-Signature`` with the
SDK (``stripe.Webhook.construct_event``) and raises ``WebhookSignatureInvalid`` for anything it
refuses, so no caller needs ``stripe`` for that either.

Hazard behind the ``ProviderBug`` lines: the SDK's own HTTP clients wrap *any* exception
raised while sending into ``APIConnectionError`` -- a vcrpy cassette miss, a bug in a
transport, even a ``DeprecationWarning`` turned into an error by ``-W error`` (the SDK's
HTTPXClient passes a string as ``data=``, which httpx deprecates).  Treated as a timeout,
such a bug would send the worker into "query first, retry later" forever and hide the bug.
So our HTTP client wraps only urllib3's and the socket's errors, and the mapping checks the
cause chain again for any other client.
"""

from __future__ import annotations

import email.utils
import os
import ssl
import threading
import time
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import certifi
import stripe
import urllib3

from orchestrator.providers import keys
from orchestrator.providers.base import (
    Declined,
    OutcomeUnknown,
    PaymentError,
    Permanent,
    ProviderError,
    ProviderEvent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
    Retryable,
    WebhookSignatureInvalid,
)
from orchestrator.stripe_version import PINNED_API_VERSION

if TYPE_CHECKING:
    from orchestrator.settings import Settings

# Stripe's maximum page size for list endpoints.
LIST_PAGE_LIMIT = 100
# How old a webhook's signed timestamp may be (Stripe's own default): a captured request
# replayed later than this is refused.  Shorter would refuse genuine deliveries from a host
# whose clock is a little off; longer widens the replay window.
WEBHOOK_TOLERANCE_SECONDS = 300


class ProviderBug(Exception):
    """A failure that is ours, not the network's: never an unknown outcome, never retried.

    Deliberately not a ``ProviderError``: the worker must not catch it as a provider outcome.
    """


Transport = Callable[[str, str, bytes | None, dict[str, str]], urllib3.BaseHTTPResponse]
"""Sends one request (method, URL, body, headers) and answers urllib3's response, or raises
urllib3's (or the socket's) error.  Production sends through ``_ThreadPools``; unit tests
pass a function that answers canned responses without a network."""


class _Urllib3Client(stripe.HTTPClient):
    """The SDK's HTTP seam, on urllib3 connection pools we configure (timeouts, TLS, proxy).

    Why urllib3 and not httpx (which the rest of payorch uses): the provider call is the
    worker's hot path, twice per payment, and urllib3 spends about half the CPU per request
    of httpx (the benchmark, ``payorch bench`` and docs/performance.md, measures this).
    urllib3 is what the SDK's own ``RequestsClient`` sends through, minus the layer of
    ``requests``.
    """

    name = "urllib3"

    def __init__(
        self, *, connect_timeout: float, read_timeout: float, transport: Transport | None
    ) -> None:
        super().__init__()
        self._pools: _ThreadPools | None = None
        if transport is None:
            self._pools = _ThreadPools(urllib3.Timeout(connect=connect_timeout, read=read_timeout))
            transport = self._pools
        self._transport = transport

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        post_data: Any = None,
        *,
        _usage: list[str] | None = None,
    ) -> tuple[str, int, Mapping[str, str]]:
        body = post_data.encode() if isinstance(post_data, str) else post_data
        try:
            response = self._transport(method.upper(), url, body, dict(headers or {}))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # Only a transport failure means "the network failed" (``_is_transport_failure``
            # reads the cause again); anything else raised here (a cassette miss, a bug)
            # must surface as itself.
            raise stripe.APIConnectionError(  # type: ignore[no-untyped-call]
                f"Network error talking to Stripe: {type(exc).__name__}: {exc}",
                should_retry=False,
            ) from exc
        return response.data.decode("utf-8", errors="replace"), response.status, response.headers

    def close(self) -> None:
        if self._pools is not None:
            self._pools.close()


class _ThreadPools:
    """urllib3 connection pools **per thread**, all sharing one SSL context.

    A thread makes one call at a time, so its own pool holds the one connection it keeps
    alive and never waits for another thread's.  One pool shared by a worker's 128 threads
    spent a large share of the worker's CPU in the pool's bookkeeping (httpx scanned every
    connection under one lock), and a pool smaller than the threads made them queue (which
    then looks like an outage).

    ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` from the environment are honoured, as the
    SDK's other clients do: an egress proxy in front of Stripe is common.
    """

    def __init__(self, timeout: urllib3.Timeout) -> None:
        self._timeout = timeout
        # Loading the CA bundle costs milliseconds: once per adapter, not per thread.
        self._ssl_context = trusted_context()
        # Read once, like the SDK's other clients: {"https": "http://proxy:3128", "no": …}.
        self._proxies = urllib.request.getproxies_environment()
        self._proxy_by_origin: dict[str, str | None] = {}
        self._local = threading.local()
        # One finalizer per thread's pools.  Hazard: a pool dropped without close() leaks
        # its keep-alive socket (a ResourceWarning, an fd until the GC runs).  A thread's
        # pools are closed when it ends (the thread-local drops its holder) or at close(),
        # whichever comes first; a finalizer runs at most once.
        self._finalizers: set[weakref.finalize[Any, Any]] = set()
        self._finalizers_lock = threading.Lock()

    def proxy_for(self, url: str) -> str | None:
        """The proxy a request to ``url`` goes through, or None to go direct."""
        parsed = urllib3.util.parse_url(url)
        proxy = self._proxies.get(parsed.scheme or "")
        # proxy_bypass reads NO_PROXY (on Linux; the system's settings elsewhere).
        if not proxy or urllib.request.proxy_bypass(parsed.host or ""):
            return None
        return str(proxy)

    def __call__(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> urllib3.BaseHTTPResponse:
        # The origin is the text before the path: "https://api.stripe.com".
        scheme, _, rest = url.partition("://")
        host, slash, path = rest.partition("/")
        origin = f"{scheme}://{host}"
        if origin not in self._proxy_by_origin:
            self._proxy_by_origin[origin] = self.proxy_for(url)
        proxy = self._proxy_by_origin[origin]
        options: dict[str, Any] = {
            "body": body,
            "headers": headers,
            "retries": False,  # one layer retries: the worker's
            "redirect": False,
            "preload_content": True,
        }
        holder = self._holder()
        if proxy is not None:
            # The proxy manager adds what a proxy needs (absolute form, Host, CONNECT).
            return holder.proxied(proxy, self._pool_options()).urlopen(method, url, **options)
        pool = holder.pools.get(origin)
        if pool is None:
            pool = holder.pools[origin] = holder.direct(self._pool_options()).connection_from_url(
                url
            )
        return pool.urlopen(method, slash + path, assert_same_host=False, **options)

    def _pool_options(self) -> dict[str, Any]:
        return {
            "maxsize": 1,  # one call at a time per thread: never waits for a connection
            "block": False,
            "timeout": self._timeout,
            "retries": False,
            "ssl_context": self._ssl_context,
        }

    def _holder(self) -> _ThreadHolder:
        holder: _ThreadHolder | None = getattr(self._local, "holder", None)
        if holder is None:
            holder = _ThreadHolder()
            self._local.holder = holder
            finalizer = weakref.finalize(holder, holder.managers_close, holder.managers)
            with self._finalizers_lock:
                self._finalizers = {f for f in self._finalizers if f.alive}
                self._finalizers.add(finalizer)
        return holder

    def close(self) -> None:
        with self._finalizers_lock:
            finalizers, self._finalizers = self._finalizers, set()
        for finalizer in finalizers:
            finalizer()


def trusted_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """The TLS context for Stripe: certificates and host names verified against
    ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set (a company's CA behind an intercepting
    egress proxy), else certifi's bundle.  The same choice httpx made for this adapter
    before it moved to urllib3."""
    env = os.environ if environ is None else environ
    if env.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
    if env.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=env["SSL_CERT_DIR"])
    return ssl.create_default_context(cafile=certifi.where())


class _ThreadHolder:
    """What a thread's ``threading.local`` holds: its pool managers and the direct pools taken
    from them by origin.  When the thread ends, the holder goes, and its finalizer closes the
    managers (and with them every pool and socket)."""

    __slots__ = ("__weakref__", "direct_manager", "managers", "pools", "proxy_managers")

    def __init__(self) -> None:
        self.managers: list[urllib3.PoolManager] = []  # every manager, for the finalizer
        self.direct_manager: urllib3.PoolManager | None = None
        self.pools: dict[str, urllib3.HTTPConnectionPool] = {}
        self.proxy_managers: dict[str, urllib3.ProxyManager] = {}

    def direct(self, options: dict[str, Any]) -> urllib3.PoolManager:
        if self.direct_manager is None:
            self.direct_manager = urllib3.PoolManager(num_pools=4, **options)
            self.managers.append(self.direct_manager)
        return self.direct_manager

    def proxied(self, proxy: str, options: dict[str, Any]) -> urllib3.ProxyManager:
        manager = self.proxy_managers.get(proxy)
        if manager is None:
            manager = self.proxy_managers[proxy] = urllib3.ProxyManager(
                proxy, num_pools=4, **options
            )
            self.managers.append(manager)
        return manager

    @staticmethod
    def managers_close(managers: list[urllib3.PoolManager]) -> None:
        for manager in managers:
            manager.clear()


class StripeProvider:
    """``PaymentProvider`` on the official SDK.  Thread-safe: one per process is enough."""

    name = "stripe"

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str = stripe.DEFAULT_API_BASE,
        connect_timeout: float,
        read_timeout: float,
        transport: Transport | None = None,
        api_version: str = PINNED_API_VERSION,
    ) -> None:
        # The SDK offers telemetry (a request-metrics header, a telemetry id written under
        # ~/.config/stripe, the platform string) only as a module switch; it is one-way and
        # the same for every client in the process, so setting it here is harmless.
        stripe.enable_telemetry = False
        # connect: a refused/unroutable connect proves nothing was sent, so it can be short.
        # read (every wait on the socket after the connect, sending included): too short
        # turns slow successes into unknown outcomes (a query each); too long lets a hung
        # provider eat the worker's lease.  No pool wait: each thread has its own connection.
        self._http_client = _Urllib3Client(
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
        )

    @property
    def sdk(self) -> stripe.StripeClient:
        """The configured SDK client, for tests and diagnostics; the worker uses the
        protocol methods only."""
        return self._client

    @classmethod
    def from_settings(cls, settings: Settings) -> StripeProvider:
        return cls(
            api_key=settings.stripe_api_key.get_secret_value(),
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
            "post", "/v1/payment_intents", params, idempotency_key=keys.create_key(record_id)
        )

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
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
            idempotency_key=keys.confirm_key(record_id, attempt),
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
        with _mapped_errors():
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
        with _mapped_errors():
            intent = self._client.v1.payment_intents.capture(
                provider_payment_id,
                params,  # type: ignore[arg-type]
                {"idempotency_key": keys.capture_key(operation_id, attempt)},
            )
        return parse_intent(intent)

    def cancel_payment(
        self, provider_payment_id: str, *, operation_id: str, attempt: int, reason: str | None
    ) -> ProviderPayment:
        params: dict[str, Any] = {}
        if reason is not None:
            params["cancellation_reason"] = reason
        with _mapped_errors():
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
        with _mapped_errors():
            refund = self._client.v1.refunds.create(
                params,  # type: ignore[arg-type]
                {"idempotency_key": keys.refund_key(operation_id, attempt)},
            )
        return parse_refund(refund)

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        with _mapped_errors():
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
        with _mapped_errors():
            page = self._client.v1.refunds.list(params)  # type: ignore[arg-type]
        return RefundPage(
            refunds=tuple(parse_refund(r) for r in page.data), has_more=bool(page.has_more)
        )

    def parse_webhook_event(
        self, payload: bytes, signature_header: str, secret: str
    ) -> ProviderEvent:
        """See the module-level ``parse_webhook_event``."""
        return parse_webhook_event(payload, signature_header, secret)

    def retrieve_payment(self, provider_payment_id: str) -> ProviderPayment:
        return self._intent_call(
            "get",
            f"/v1/payment_intents/{quote(provider_payment_id, safe='')}",
            {},
            idempotency_key=None,
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
        with _mapped_errors():
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


# -- responses -------------------------------------------------------------------------


def _to_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, stripe.StripeObject):
        return value.to_dict()
    return dict(value) if isinstance(value, Mapping) else {}


def parse_intent(intent: Any) -> ProviderPayment:
    """A Stripe PaymentIntent (SDK object or plain dict) as our ``ProviderPayment``."""
    raw = _to_dict(intent)
    error = raw.get("last_payment_error")
    latest_charge = raw.get("latest_charge")
    if isinstance(latest_charge, Mapping):  # expanded
        latest_charge = latest_charge.get("id")
    amount_received = raw.get("amount_received")
    return ProviderPayment(
        id=str(raw["id"]),
        status=str(raw["status"]),
        amount=int(raw["amount"]),
        currency=str(raw["currency"]),
        metadata={str(k): str(v) for k, v in (raw.get("metadata") or {}).items()},
        latest_charge=str(latest_charge) if latest_charge else None,
        last_payment_error=(
            PaymentError(
                code=error.get("code"),
                decline_code=error.get("decline_code"),
                message=error.get("message"),
                payment_method=_id_of(error.get("payment_method")),
            )
            if isinstance(error, Mapping)
            else None
        ),
        created=int(raw["created"]) if raw.get("created") is not None else None,
        payment_method=_id_of(raw.get("payment_method")),
        customer=_id_of(raw.get("customer")),
        capture_method=str(raw.get("capture_method") or "automatic"),
        amount_received=int(amount_received) if amount_received is not None else None,
        amount_capturable=int(raw.get("amount_capturable") or 0),
        next_action=(
            dict(raw["next_action"]) if isinstance(raw.get("next_action"), Mapping) else None
        ),
        client_token=str(raw["client_secret"]) if raw.get("client_secret") else None,
        cancellation_reason=(
            str(raw["cancellation_reason"]) if raw.get("cancellation_reason") else None
        ),
        raw=raw,
    )


def parse_refund(refund: Any) -> ProviderRefund:
    """A Stripe Refund (SDK object or plain dict) as our ``ProviderRefund``."""
    raw = _to_dict(refund)
    created = raw.get("created")
    return ProviderRefund(
        id=str(raw["id"]),
        provider_payment_id=_id_of(raw.get("payment_intent")) or "",
        amount=int(raw["amount"]),
        currency=str(raw["currency"]),
        status=str(raw.get("status") or "pending"),
        metadata={str(k): str(v) for k, v in (raw.get("metadata") or {}).items()},
        reason=str(raw["reason"]) if raw.get("reason") else None,
        failure_reason=str(raw["failure_reason"]) if raw.get("failure_reason") else None,
        created=int(created) if created is not None else None,
        raw=raw,
    )


# -- webhooks --------------------------------------------------------------------------


def parse_webhook_event(payload: bytes, signature_header: str | None, secret: str) -> ProviderEvent:
    """A webhook Stripe signed (``Stripe-Signature: t=…,v1=…``, HMAC-SHA256 of
    ``"{t}.{payload}"`` with the endpoint's ``whsec_`` secret), verified by the SDK with a
    300 s tolerance, as our ``ProviderEvent``.

    A missing, wrong or stale signature, or a body that is not an event, raises
    ``WebhookSignatureInvalid``: the route answers 400 and stores nothing.  Verification is
    the SDK's (``stripe.Webhook.construct_event``), never ours: constant-time comparison,
    several ``v1`` signatures during a secret roll, the timestamp check.
    """
    try:
        event = stripe.Webhook.construct_event(
            payload, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS
        )
    except stripe.SignatureVerificationError as exc:
        raise WebhookSignatureInvalid(
            f"Stripe-Signature rejected: {exc.user_message or exc}"
        ) from exc
    except ValueError as exc:  # the body is not JSON (the signature matched bytes, not an event)
        raise WebhookSignatureInvalid(f"the webhook body is not a Stripe event: {exc}") from exc
    return event_from_dict(_to_dict(event))


def event_from_dict(raw: Mapping[str, Any]) -> ProviderEvent:
    """A Stripe Event (already verified, or listed from ``/v1/events``) as ``ProviderEvent``."""
    data = raw.get("data")
    obj = data.get("object") if isinstance(data, Mapping) else None
    if not isinstance(obj, Mapping) or not raw.get("id") or not raw.get("type"):
        raise WebhookSignatureInvalid("the webhook body is not a Stripe event (no data.object)")
    object_type = str(obj.get("object") or "")
    object_id = str(obj.get("id") or "")
    intent = object_id if object_type == "payment_intent" else _id_of(obj.get("payment_intent"))
    return ProviderEvent(
        id=str(raw["id"]),
        type=str(raw["type"]),
        created=int(raw.get("created") or 0),
        object_id=object_id,
        object_type=object_type,
        provider_payment_id=intent,
        raw=dict(raw),
    )


def _id_of(value: Any) -> str | None:
    """An id field, expanded (an object) or not (a string)."""
    if isinstance(value, Mapping):
        value = value.get("id")
    return str(value) if value else None


# -- errors ----------------------------------------------------------------------------


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except stripe.StripeError as exc:
        raise map_stripe_error(exc) from exc


def _is_transport_failure(exc: stripe.APIConnectionError) -> bool:
    """Whether the exception the SDK wrapped is a genuine network failure.

    Only the wrapped exception itself decides (not whatever it was raised while handling):
    a cassette miss raised during the handling of an old socket error is still a miss.
    """
    cause: BaseException | None = exc.__cause__ or exc.__context__
    while isinstance(cause, stripe.APIConnectionError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, urllib3.exceptions.LocationValueError):
        return False  # our URL is malformed (a bad scheme, no host): nothing was ever sent
    # Everything else urllib3 raises is the network's: a refused or timed-out connect, a
    # reset, a response cut short or one whose body arrived damaged (DecodeError).  The
    # request may have reached Stripe.
    return isinstance(cause, urllib3.exceptions.HTTPError | OSError)


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or bad."""
    if not headers:
        return None
    value = None
    for name, header_value in headers.items():
        if name.lower() == "retry-after":
            value = header_value.strip()
            break
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(moment.timestamp() - (time.time() if now is None else now), 0.0)


def _error_field(exc: stripe.StripeError, name: str) -> Any:
    return getattr(exc.error, name, None) if exc.error is not None else None


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value.strip().lower()
    return None


def map_stripe_error(exc: stripe.StripeError) -> ProviderError | ProviderBug:
    """The taxonomy exception for an SDK exception (see the tree in the module docstring),
    then ``Stripe-Should-Retry`` when Stripe sent it: Stripe knows better than our guess.

    * ``true``: retrying the same request is safe and may succeed -> ``Retryable`` (a 5xx
      that would have been an unknown outcome, a 4xx we would have called permanent).
    * ``false``: the same request must not simply be sent again -> a ``Retryable`` becomes
      ``OutcomeUnknown``, so the worker asks the provider before anything else.
    Declines are outcomes, not failures, and a ``ProviderBug`` never reached Stripe: the
    header does not apply to them.
    """
    mapped = _classify(exc)
    should_retry = _header(exc.headers, "stripe-should-retry")
    if isinstance(mapped, Declined | ProviderBug) or should_retry is None:
        return mapped
    if should_retry == "true" and not isinstance(mapped, Retryable):
        return Retryable(
            f"{mapped.message} (Stripe-Should-Retry: true)",
            retry_after=retry_after_seconds(exc.headers),
            code=getattr(mapped, "code", None),
            http_status=mapped.http_status,
        )
    if should_retry == "false" and isinstance(mapped, Retryable):
        return OutcomeUnknown(
            f"{mapped.message} (Stripe-Should-Retry: false)", http_status=mapped.http_status
        )
    return mapped


def _classify(exc: stripe.StripeError) -> ProviderError | ProviderBug:
    status = exc.http_status
    message = exc.user_message or str(exc)
    code = exc.code or _error_field(exc, "code")
    if isinstance(exc, stripe.CardError):
        intent = _error_field(exc, "payment_intent")
        provider_payment_id = intent if isinstance(intent, str) else _to_dict(intent).get("id")
        return Declined(
            message,
            code=code or "card_declined",
            decline_code=_error_field(exc, "decline_code"),
            provider_payment_id=str(provider_payment_id) if provider_payment_id else None,
            http_status=status,
        )
    if isinstance(exc, stripe.IdempotencyError):
        return Permanent(message, code=code or "idempotency_error", http_status=status)
    if isinstance(exc, stripe.InvalidRequestError | stripe.AuthenticationError):
        return Permanent(message, code=code, http_status=status)
    if isinstance(exc, stripe.PermissionError):
        return Permanent(message, code=code, http_status=status)
    if isinstance(exc, stripe.RateLimitError):
        return Retryable(
            message,
            retry_after=retry_after_seconds(exc.headers),
            code=code or "rate_limit",
            http_status=status,
        )
    if isinstance(exc, stripe.APIConnectionError):
        if _is_transport_failure(exc):
            return OutcomeUnknown(message, http_status=None)
        return ProviderBug(f"not a network failure, though the SDK calls it one: {message}")
    if status == 409 and code == "idempotency_key_in_use":
        return Retryable(
            message, retry_after=retry_after_seconds(exc.headers), code=code, http_status=status
        )
    if status is not None and 400 <= status < 500:
        return Permanent(message, code=code, http_status=status)
    # 5xx, or an answer the SDK could not read: Stripe may have acted.
    return OutcomeUnknown(message, http_status=status)
