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
               before any confirm, the unconfirmed payment as we know it; after
               ``technical_cancel_after`` unknown outcomes, the technical cancel instead
    list       nothing to list: an empty page (no create reached Adyen, so none is lost)
    details n  POST /payments/details with the shopper's result as the merchant sent it
               (``submit_action_result``), key payorch-{id}-details-{n}; once one was
               answered, a retrieve replays the last one instead of the confirm (its answer
               is the newer: the confirm's says only "authenticate")

How an authorisation whose outcome is unknown (timeout, reset, 5xx) is resolved, a rung at
a time (the engine counts the unknown outcomes and passes the count to ``retrieve``)::

    1. replay   fewer than ``technical_cancel_after`` unknown outcomes: replay confirm n's
                key; Adyen's stored answer, or the request processed once, settles it
    2. cancel   from then on, never the key again: ``POST /cancels`` by our reference under
                a fixed key (``adyen_technical_cancel``), re-sent while no TECHNICAL_CANCEL
                notification is stored (the same request: safe, a cancel moves no money)
    3. wait     the stored notifications are the answer: TECHNICAL_CANCEL (and the
                AUTHORISATION it may have met) settle the payment; until one arrives the
                read is itself an unknown outcome, so the payment waits (``processing``,
                woken by the notification) and parks only when its attempts run out

After the charge, Adyen's modifications answer ``received``; their outcome is a notification,
which payorch stores and this adapter reads back (``adyen_modifications``, decision 0072)::

    capture n  POST /payments/{psp}/captures, reference = operation id, key
               payorch-{op}-capture-{n}: processing
    cancel n   POST /payments/{psp}/cancels, the same: processing
    retrieve   the stored notifications; with a PendingCall, that call's notification
               decides (refused: ``refused_call``), and while there is none the call is
               replayed under its own key and the payment reads processing
    refund     POST /payments/{psp}/refunds, key payorch-{op}-refund-1 (fixed): pending, the
               modification's pspReference its id; read back from REFUND / REFUND_FAILED, the
               create replayed while none; listed from the stored REFUND items

Hazards:

* **Never "still owed" while a call of ours may be in flight.**  A capture answers
  ``received``; if a read after it said ``requires_capture`` before the CAPTURE notification
  arrived, the engine would send capture n+1 under a new key: a second capture.  So a read
  that resolves a pending call answers ``processing`` until that call's notification is
  stored, and replays the call under its own key meanwhile (Adyen answers the stored
  ``received``, or processes it once if it never arrived).  An asynchronous failure
  (CAPTURE_FAILED, success=false) fails the operation through ``refused_call``, never by
  sending again.

* **Never a new key on a guess.** Adyen does not enforce unique references: two keys make two
  authorisations.  The engine takes confirm n+1 only after a read proved n harmless, and for
  Adyen that read is n's own replay, which either returns n's result or makes n happen.
* Adyen keeps a key at least 7 days; a payment that waits longer than that for a re-check is
  parked by its attempts long before.
* Idempotency keys are at most 64 characters at Adyen; ours are ``payorch-{id}-{step}-{n}``.
* **Never replay confirm n after its technical cancel.**  A request Adyen never processed
  would be processed by the replay: an authorisation after the cancel.  The count only
  grows, so once past the threshold every read stays on rungs 2 and 3.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from Adyen import AdyenClient
from Adyen.services.checkout import ModificationsApi, PaymentsApi

from orchestrator.providers import keys
from orchestrator.providers.adyen_errors import mapped_errors
from orchestrator.providers.adyen_http import AdyenHttp
from orchestrator.providers.adyen_modifications import (
    ANSWERS,
    call_outcome,
    payment_state,
    refunds_of,
)
from orchestrator.providers.adyen_objects import (
    REFERENCE_PREFIX,
    modification_request,
    parse_payment,
    payment_request,
    placeholder,
    received,
    refused_payment,
)
from orchestrator.providers.adyen_technical_cancel import (
    Awaiting,
    cancel_request,
    has_technical_cancel,
    read_outcome,
)
from orchestrator.providers.base import (
    ActionResult,
    Declined,
    NoEventLog,
    PaymentOrder,
    PendingCall,
    Permanent,
    ProviderEventLog,
    ProviderPayment,
    ProviderPaymentPage,
    ProviderRefund,
    RecordedPayment,
    RefundPage,
    RefusedCall,
)
from orchestrator.providers.http_pools import Transport
from orchestrator.providers.keys import REFUND_ID_METADATA_KEY

TEST_API_BASE = "https://checkout-test.adyen.com"
CHECKOUT_VERSION = "v71"
MAX_KEY_LENGTH = 64
# Unknown outcomes of an authorisation after which its key is no longer replayed and a
# technical cancel resolves it (``Settings.adyen_technical_cancel_after``).
DEFAULT_TECHNICAL_CANCEL_AFTER = 3


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
    # 3-D Secure completes through us: the shopper's result is forwarded to /payments/details.
    accepts_action_result = True
    # What each call sends, for the operator's page (``observed``): a retrieve is the
    # confirm's replay, and create and lookup send nothing.
    request_paths: dict[str, tuple[str, str]] = {  # noqa: RUF012 (read-only by convention)
        "create": ("-", "(nothing sent: known by our reference)"),
        "confirm": ("POST", "/payments"),
        "retrieve": (
            "POST",
            "/payments (the last confirm or details, or the pending modification, replayed)"
            " or /cancels",
        ),
        "details": ("POST", "/payments/details"),
        "lookup": ("-", "(nothing to list)"),
        "capture": ("POST", "/payments/{id}/captures"),
        "cancel": ("POST", "/payments/{id}/cancels (nothing sent when known only by reference)"),
        "refund": ("POST", "/payments/{id}/refunds"),
        "retrieve_refund": (
            "POST",
            "/payments/{id}/refunds (stored notifications; the create replayed while none)",
        ),
        "list_refunds": ("-", "(the payment's stored REFUND notifications)"),
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
        events: ProviderEventLog | None = None,
        technical_cancel_after: int = DEFAULT_TECHNICAL_CANCEL_AFTER,
    ) -> None:
        self.merchant_account = merchant_account
        self.technical_cancel_after = technical_cancel_after
        # What Adyen told us by notification: the only word on a modification's outcome.
        self._events: ProviderEventLog = events or NoEventLog()
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
        route_attempt: int = 1,
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
                route_attempt=route_attempt,
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
        unknown_outcomes: int = 0,
        pending: PendingCall | None = None,
        action_result: ActionResult | None = None,
    ) -> ProviderPayment:
        if order is None:
            # After the charge: the payment as its stored notifications say.
            return self._read(provider_payment_id, pending)
        if confirm_attempt < 1:
            return placeholder(order)
        if unknown_outcomes >= self.technical_cancel_after:
            # Replays have not settled it: from here on the key is never sent again.
            return self._resolve_by_technical_cancel(order)
        try:
            if action_result is not None:
                return self._details(order, action_result)
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
        key = _checked_key(keys.confirm_key(order.record_id, attempt, order.route_attempt))
        body = payment_request(order, merchant_account=self.merchant_account)
        with mapped_errors():
            result = self._payments.payments(body, idempotency_key=key)
        return parse_payment(_answer(result), order)

    def _resolve_by_technical_cancel(self, order: PaymentOrder) -> ProviderPayment:
        """Rungs 2 and 3: the stored notifications settle the payment; while none has
        answered the cancel, (re-)send it and read again.  A cancel Adyen accepted whose
        notification (or the authorisation's) has not arrived yet is the provider still
        processing: the payment waits for the notification, which wakes it, spending no
        attempt; a lost answer to the cancel itself stays an unknown outcome."""
        payloads = self._events.payloads(record_id=order.record_id)
        if not has_technical_cancel(payloads, order.record_id):
            self._send_technical_cancel(order.record_id, order.route_attempt)
            # The notification may have come while the cancel's answer travelled back.
            payloads = self._events.payloads(record_id=order.record_id)
        try:
            return read_outcome(payloads, order)
        except Awaiting as awaiting:
            return placeholder(order, status="processing", awaiting=str(awaiting))

    def _send_technical_cancel(self, record_id: str, route_attempt: int) -> None:
        """``POST /cancels`` by our reference, under its one fixed key: a lost answer is
        resolved by sending the same request again."""
        key = _checked_key(keys.technical_cancel_key(record_id, route_attempt))
        body = cancel_request(record_id, merchant_account=self.merchant_account)
        with mapped_errors():
            self._modifications.cancel_authorised_payment(body, idempotency_key=key)

    def submit_action_result(
        self,
        provider_payment_id: str,
        *,
        record_id: str,
        action_result: ActionResult,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """``POST /payments/details``: the shopper's 3-D Secure (or redirect) result, as the
        merchant's front end produced it.  Its answer reads as ``/payments``'s does."""
        return self._details(_required(order, record_id), action_result)

    def _details(self, order: PaymentOrder, action_result: ActionResult) -> ProviderPayment:
        key = _checked_key(
            keys.details_key(order.record_id, action_result.attempt, order.route_attempt)
        )
        # The body exactly as stored: a replay under this key must be the same request.
        body = dict(action_result.body)
        with mapped_errors():
            result = self._payments.payments_details(body, idempotency_key=key)
        return parse_payment(_answer(result), order)

    def list_payments(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> ProviderPaymentPage:
        """Adyen cannot list payments, and needs no lookup: ``create`` sends nothing, so no
        create's outcome is ever unknown."""
        return ProviderPaymentPage(provider_payments=(), has_more=False)

    # -- after the charge: asynchronous modifications ---------------------------------------
    # Each answers ``received``; its outcome is the notification payorch stored
    # (``adyen_modifications``).  See the module docstring's hazards.

    def capture_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        amount_to_capture: int | None,
    ) -> ProviderPayment:
        """``POST /payments/{psp}/captures`` (reference = the operation id): ``processing``
        until the CAPTURE notification says what happened."""
        recorded = self._recorded(provider_payment_id)
        amount = recorded.amount if amount_to_capture is None else amount_to_capture
        self._capture(provider_payment_id, recorded, operation_id, attempt, amount)
        return self._state(provider_payment_id, recorded, status="processing")

    def cancel_payment(
        self,
        provider_payment_id: str,
        *,
        operation_id: str,
        attempt: int,
        reason: str | None,
        order: PaymentOrder | None = None,
    ) -> ProviderPayment:
        """``POST /payments/{psp}/cancels`` (reference = the operation id): ``processing``
        until the CANCELLATION notification says what happened."""
        if order is not None and provider_payment_id == REFERENCE_PREFIX + order.record_id:
            # Known only by our reference: Adyen never authorised it (a 3-D Secure challenge
            # names no pspReference, and only our forward to /payments/details could finish
            # it).  Nothing is held, so nothing is sent: the abandoned session lapses at Adyen.
            return placeholder(order, status="canceled", cancellation_reason=reason)
        recorded = self._recorded(provider_payment_id)
        self._cancel(provider_payment_id, operation_id, attempt)
        return self._state(provider_payment_id, recorded, status="processing")

    def _capture(
        self,
        provider_payment_id: str,
        recorded: RecordedPayment,
        operation_id: str,
        attempt: int,
        amount: int,
    ) -> None:
        body = modification_request(
            self.merchant_account, operation_id, amount=amount, currency=recorded.currency
        )
        key = _checked_key(keys.capture_key(operation_id, attempt))
        with mapped_errors():
            result = self._modifications.capture_authorised_payment(
                body, provider_payment_id, idempotency_key=key
            )
        received(_answer(result), "capture")

    def _cancel(self, provider_payment_id: str, operation_id: str, attempt: int) -> None:
        body = modification_request(self.merchant_account, operation_id)
        key = _checked_key(keys.cancel_key(operation_id, attempt))
        with mapped_errors():
            result = self._modifications.cancel_authorised_payment_by_psp_reference(
                body, provider_payment_id, idempotency_key=key
            )
        received(_answer(result), "cancel")

    def _read(self, provider_payment_id: str, pending: PendingCall | None) -> ProviderPayment:
        """The payment from its stored notifications; with ``pending``, the read resolves
        that call of ours: its notification decides, and while there is none the call is
        replayed under its own key (Adyen answers the stored ``received``, or processes the
        call once if it never arrived) and the payment reads ``processing``: never the
        ``requires_capture`` that would make the engine send the call again."""
        items = self._events.payloads(provider_payment_id=provider_payment_id)
        recorded = self._events.recorded_payment(provider_payment_id)
        state = payment_state(items, provider_payment_id, recorded)
        if pending is None or pending.step not in ANSWERS:
            return state
        outcome = call_outcome(items, step=pending.step, reference=pending.operation_id)
        if outcome is None:
            try:
                self._replay(provider_payment_id, recorded, pending)
            except Permanent as error:
                if error.http_status in (401, 403):
                    raise  # our credentials, not the call: an operator looks
                # Adyen refused the request itself (a 4xx: nothing happened), as it refused
                # the call this read resolves: that call failed, with Adyen's words.
                refused = RefusedCall(
                    pending.operation_id, error.code or "invalid_request", error.message
                )
                return replace(state, refused_call=refused)
            return replace(state, status="processing")
        if not outcome.succeeded:
            refused = RefusedCall(
                operation_id=pending.operation_id,
                code=outcome.code or f"{pending.step}_failed",
                message=outcome.reason or f"Adyen refused the {pending.step}",
            )
            return replace(state, refused_call=refused)
        return state

    def _replay(
        self, provider_payment_id: str, recorded: RecordedPayment | None, pending: PendingCall
    ) -> None:
        """The pending capture or cancel again, under its own key and with its own body."""
        if pending.step == "capture":
            known = self._recorded(provider_payment_id, recorded)
            amount = known.amount if pending.amount is None else pending.amount
            self._capture(provider_payment_id, known, pending.operation_id, pending.attempt, amount)
        elif pending.step == "cancel":
            self._cancel(provider_payment_id, pending.operation_id, pending.attempt)

    def _recorded(
        self, provider_payment_id: str, known: RecordedPayment | None = None
    ) -> RecordedPayment:
        recorded = known or self._events.recorded_payment(provider_payment_id)
        if recorded is None:
            # Nothing sent: a modification repeats the payment's currency, and its outcome is
            # read from notifications stored for one of our payments.
            raise Permanent(
                f"no payment of ours carries Adyen pspReference {provider_payment_id}",
                code="payment_not_recorded",
            )
        return recorded

    def _state(
        self, provider_payment_id: str, recorded: RecordedPayment, *, status: str
    ) -> ProviderPayment:
        items = self._events.payloads(provider_payment_id=provider_payment_id)
        return replace(payment_state(items, provider_payment_id, recorded), status=status)

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
        """``POST /payments/{psp}/refunds`` (reference = our refund id): a ``pending``
        refund, the modification's pspReference its id, until the REFUND notification."""
        recorded = self._recorded(provider_payment_id)
        body = modification_request(
            self.merchant_account, operation_id, amount=amount, currency=recorded.currency
        )
        key = _checked_key(keys.refund_key(operation_id, attempt))
        with mapped_errors():
            result = self._modifications.refund_captured_payment(
                body, provider_payment_id, idempotency_key=key
            )
        answer = received(_answer(result), "refund")
        return ProviderRefund(
            id=str(answer["pspReference"]),
            provider_payment_id=str(answer.get("paymentPspReference") or provider_payment_id),
            amount=amount,
            currency=recorded.currency.lower(),
            status="pending",
            metadata={REFUND_ID_METADATA_KEY: str(answer.get("reference") or operation_id)},
            reason=reason,
            raw=answer,
        )

    def retrieve_refund(
        self, refund_id: str, *, pending: PendingCall | None = None
    ) -> ProviderRefund:
        """The refund from its stored notifications.  While none is stored, the create is
        replayed under its fixed key (Adyen answers the stored ``received``, the same
        pspReference): the refund is still ``pending``."""
        if pending is None:
            raise Permanent(
                "an Adyen refund is read from its payment's notifications: the read needs "
                "the create it resolves",
                code="pending_call_required",
            )
        psp = pending.provider_payment_id
        items = self._events.payloads(provider_payment_id=psp)
        refund = next(
            (r for r in self._refunds(psp, items) if r.id == refund_id),
            None,
        )
        if refund is not None:
            return refund
        if pending.amount is None:
            raise Permanent("a refund create without an amount", code="amount_required")
        return self.create_refund(
            provider_payment_id=psp,
            operation_id=pending.operation_id,
            attempt=pending.attempt,
            amount=pending.amount,
            reason=None,
            metadata={},
        )

    def list_refunds(
        self, provider_payment_id: str, *, starting_after: str | None, limit: int
    ) -> RefundPage:
        """The refunds the payment's stored notifications name, newest first, in one page.
        Safe as a lookup after an unknown create: the refund key is fixed, so the create
        re-sent after "not found" is a replay Adyen answers from its store (the same
        refund), never a second refund."""
        items = self._events.payloads(provider_payment_id=provider_payment_id)
        refunds = self._refunds(provider_payment_id, items)
        if starting_after is not None:
            ids = [r.id for r in refunds]
            refunds = refunds[ids.index(starting_after) + 1 :] if starting_after in ids else []
        return RefundPage(refunds=tuple(refunds[:limit]), has_more=len(refunds) > limit)

    def _refunds(
        self, provider_payment_id: str, items: list[dict[str, Any]]
    ) -> list[ProviderRefund]:
        recorded = self._events.recorded_payment(provider_payment_id)
        return refunds_of(
            items, provider_payment_id, record_id=recorded.record_id if recorded else None
        )

    def close(self) -> None:
        self._http.close()


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
