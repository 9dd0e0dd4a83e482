"""Adyen behind our provider protocol (``base``): ``AdyenProvider``, on Adyen's library.

Checkout API v71 through the official library (``Adyen``), with our own HTTP client
(``adyen_http``: no retries, a connect and a read timeout, our TLS and proxy rules) and
always our derived ``Idempotency-Key``.  Its siblings hold the rest of what is Adyen's:

    adyen_http.py      the HTTP client the library sends through
    adyen_errors.py    library and transport failures -> our taxonomy (the tree is drawn there)
    adyen_objects.py   Adyen's answers -> ProviderPayment / ProviderRefund, our order ->
                       Adyen's request bodies (the resultCode table is there)
    adyen_declines.py  refusal reasons -> our failure codes, card or provider

How the charge's steps map onto Adyen, which has no unconfirmed payment and no read API::

    create     nothing is sent: the payment is known by our reference (``reference:{id}``)
    confirm n  POST /payments, reference = record id, key payorch-{id}-confirm-{n}: the
               authorisation
    retrieve   confirm n replayed under the same key: Adyen answers the stored result (or
               704 while the first still runs, or processes it once if it never arrived);
               before any confirm, the unconfirmed payment as we know it
    list       nothing to list: an empty page (no create reached Adyen, so none is lost)

Hazards:

* **Never a new key on a guess.** Adyen does not enforce unique references: two keys make two
  authorisations.  The engine takes confirm n+1 only after a read proved n harmless, and for
  Adyen that read is n's own replay, which either returns n's result or makes n happen.
* Adyen keeps a key at least 7 days; a payment that waits longer than that for a re-check is
  parked by its attempts long before.
* Idempotency keys are at most 64 characters at Adyen; ours are ``payorch-{id}-{step}-{n}``.
"""

from __future__ import annotations

from typing import Any

from Adyen import AdyenClient
from Adyen.services.checkout import ModificationsApi, PaymentsApi

from orchestrator.providers import keys
from orchestrator.providers.adyen_errors import mapped_errors
from orchestrator.providers.adyen_http import AdyenHttp
from orchestrator.providers.adyen_objects import (
    parse_payment,
    payment_request,
    placeholder,
    refused_payment,
)
from orchestrator.providers.base import (
    Declined,
    PaymentOrder,
    Permanent,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RefundPage,
)
from orchestrator.providers.http_pools import Transport

TEST_API_BASE = "https://checkout-test.adyen.com"
CHECKOUT_VERSION = "v71"
MAX_KEY_LENGTH = 64


def checkout_base_url(api_base: str, live_url_prefix: str | None) -> str:
    """The Checkout root with its version: a live account's prefix URL (only live has the
    ``/checkout`` segment), else the configured base (Adyen's test endpoint by default)."""
    if live_url_prefix:
        return (
            f"https://{live_url_prefix}-checkout-live.adyenpayments.com/checkout/{CHECKOUT_VERSION}"
        )
    return f"{api_base.rstrip('/')}/{CHECKOUT_VERSION}"


class AdyenProvider:
    """``PaymentProvider`` on Adyen's library.  Thread-safe: the library's client holds no
    per-call state, and the HTTP client's pools are per thread."""

    name = "adyen"
    # What each call sends, for the operator's page (``observed``): a retrieve is the
    # confirm's replay, and create and lookup send nothing.
    request_paths: dict[str, tuple[str, str]] = {  # noqa: RUF012 (read-only by convention)
        "create": ("-", "(nothing sent: known by our reference)"),
        "confirm": ("POST", "/payments"),
        "retrieve": ("POST", "/payments (the last confirm, replayed)"),
        "lookup": ("-", "(nothing to list)"),
        "capture": ("POST", "/payments/{id}/captures"),
        "cancel": ("POST", "/payments/{id}/cancels"),
        "refund": ("POST", "/payments/{id}/refunds"),
        "retrieve_refund": ("-", "(no read API)"),
        "list_refunds": ("-", "(no read API)"),
    }

    def __init__(
        self,
        *,
        api_key: str,
        merchant_account: str,
        api_base: str = TEST_API_BASE,
        live_url_prefix: str | None = None,
        connect_timeout: float,
        read_timeout: float,
        transport: Transport | None = None,
    ) -> None:
        self.merchant_account = merchant_account
        self._http = AdyenHttp(
            connect_timeout=connect_timeout, read_timeout=read_timeout, transport=transport
        )
        client = AdyenClient(
            xapikey=api_key,
            # "live" only rewrites Adyen's own test URLs; a configured base is used as is.
            platform="live" if live_url_prefix else "test",
            live_endpoint_prefix=live_url_prefix,
        )
        client.http_client = self._http
        client.http_init = True
        base = checkout_base_url(api_base, live_url_prefix)
        self._payments = PaymentsApi(client=client)
        self._payments.baseUrl = base
        self._modifications = ModificationsApi(client=client)
        self._modifications.baseUrl = base

    # -- the charge ---------------------------------------------------------------------

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
        """Nothing to send: Adyen's one request creates and authorises (``confirm``)."""
        return placeholder(
            PaymentOrder(
                record_id=record_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                description=description,
                metadata=metadata,
                capture_method=capture_method,
                customer=customer,
            )
        )

    def confirm_payment(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        attempt: int,
        off_session: bool | None = None,
        return_url: str | None = None,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        order = _required(order, record_id)
        return self._authorise(order, attempt)

    def retrieve_payment(
        self,
        provider_payment_id: str,
        *,
        order: PaymentOrder | None = None,
        confirm_attempt: int = 0,
    ) -> ProviderPayment:
        if order is None:
            raise Permanent(
                "Adyen has no read API: a retrieve needs the order to replay",
                code="order_required",
            )
        if confirm_attempt < 1:
            return placeholder(order)
        try:
            return self._authorise(order, confirm_attempt)
        except Declined as declined:
            # A read answers what the payment is, never raises its outcome: a refusal read
            # back is a payment that needs another method, with the decline on it (the
            # protocol's shape of a declined confirm), so query-first settles it failed.
            return refused_payment(declined, order)

    def _authorise(self, order: PaymentOrder, attempt: int) -> ProviderPayment:
        if not order.return_url:
            # Adyen requires returnUrl on every /payments request (it is where a redirect
            # sends the shopper back): refused before sending, so the payment fails clearly.
            raise Permanent(
                "an Adyen payment needs return_url (Adyen requires returnUrl on every "
                "authorisation)",
                code="return_url_required",
            )
        key = _checked_key(keys.confirm_key(order.record_id, attempt))
        body = payment_request(order, merchant_account=self.merchant_account)
        with mapped_errors():
            result = self._payments.payments(body, idempotency_key=key)
        return parse_payment(_answer(result), order)

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        """Adyen cannot list payments, and needs no lookup: ``create`` sends nothing, so no
        create's outcome is ever unknown."""
        return ProviderPaymentPage(provider_payments=(), has_more=False)

    # -- after the charge -----------------------------------------------------------------
    # Adyen's modifications are asynchronous (``received``, then a notification); the engine's
    # capture, cancel and refund kinds wait for them only once notifications are read
    # (docs/decisions, the Adyen adapter).  Until then an Adyen account refuses them before
    # anything is sent, and the operation fails with this code instead of guessing.

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        raise _not_yet("capture")

    def cancel_payment(
        self, provider_payment_id: str, *, operation_id: str, attempt: int, reason: str | None
    ) -> ProviderPayment:
        raise _not_yet("cancel")

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
        raise _not_yet("refund")

    def retrieve_refund(self, refund_id: str) -> ProviderRefund:
        raise _not_yet("refund")

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        raise _not_yet("refund")

    def close(self) -> None:
        self._http.close()


def _not_yet(operation: str) -> Permanent:
    return Permanent(
        f"{operation} through an Adyen account is not supported yet: nothing was sent",
        code="operation_not_supported",
    )


def _required(order: PaymentOrder | None, record_id: str) -> PaymentOrder:
    if order is None or order.record_id != record_id:
        raise Permanent("an Adyen authorisation needs the payment's order", code="order_required")
    return order


def _checked_key(key: str) -> str:
    if len(key) > MAX_KEY_LENGTH:
        # Adyen would refuse it (400) after we committed to it: refuse before sending.
        raise Permanent(f"idempotency key longer than {MAX_KEY_LENGTH} characters: {key}")
    return key


def _answer(result: Any) -> dict[str, Any]:
    message = getattr(result, "message", None)
    return dict(message) if isinstance(message, dict) else {}
