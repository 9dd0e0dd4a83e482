"""The simulated Stripe account: intents, payment methods, charges and money movements.

Every write endpoint is split in two: ``validate_*`` (parameter checks, in
``intent_requests``; a failure is a 400 that is never saved under the idempotency key) and
``execute_*`` (the effect; its answer, success or error, is saved).  Both are synchronous and
run under the simulator's lock, so the effect of one request is atomic with respect to every
other request.  Refunds are in ``refunds``, events in ``events``; what the customer, the bank
and the Dashboard do outside the API (authenticate, settle, expire, dispute) is here too,
behind the test-only ``/_sim`` routes.

Consistency: retrieve and list read the current state (strongly consistent, like Stripe).
Search reads, for each intent, the newest version written at least ``search_lag_seconds``
ago (eventually consistent, like Stripe's search, which documents lags of up to a minute,
and an hour during outages).
"""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import time
from typing import Any

from devtools.simulator import errors, objects
from devtools.simulator import params as params_
from devtools.simulator.balance import Balance
from devtools.simulator.cards import TEST_CARDS, CardDecline
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.errors import ApiError
from devtools.simulator.events import EventLog
from devtools.simulator.intent_requests import (
    CancelRequest,
    CaptureRequest,
    ConfirmRequest,
    CreateRequest,
    validate_cancel,
    validate_capture,
    validate_confirm,
    validate_create,
)
from devtools.simulator.models import (
    Capture,
    Charge,
    Decline,
    Dispute,
    Intent,
    Movement,
    Outcome,
    PaymentMethod,
    Refund,
)
from devtools.simulator.refunds import RefundDesk
from devtools.simulator.search import SearchQueryError, parse_query
from orchestrator.providers import keys

# Statuses a PaymentIntent can be canceled from (Stripe's list, in Stripe's order).
_CANCELABLE = (
    "requires_payment_method",
    "requires_capture",
    "requires_confirmation",
    "requires_action",
    "processing",
)
_LIST_PARAMS = frozenset({"created", "ending_before", "limit", "starting_after"})
_SEARCH_PARAMS = frozenset({"limit", "page", "query"})
# Stripe's decline when a payment made without the customer needs authentication.
AUTHENTICATION_REQUIRED = CardDecline(
    "authentication_required",
    "authentication_required",
    "Your card was declined. This transaction requires authentication.",
)
_ASYNC_FAILURE = CardDecline("card_declined", "generic_decline", "Your card was declined.")
_FINAL_STATUSES = ("succeeded", "canceled", "processing", "requires_capture")


class PaymentState:
    """Not thread-safe on its own: the caller holds the simulator's lock."""

    def __init__(self, config: SimulatorConfig) -> None:
        self._config = config
        self.intents: dict[str, Intent] = {}
        self._ordered: list[Intent] = []
        self.methods: dict[str, PaymentMethod] = {}
        self.movements: list[Movement] = []
        self.declines: list[Decline] = []
        self.charges: dict[str, Charge] = {}
        self.captures: list[Capture] = []
        self.refunds = RefundDesk(self, settle_seconds=config.refund_settle_seconds)
        self.balance = Balance()
        self.disputes: dict[str, Dispute] = {}
        self.events = EventLog(api_version=config.api_version, max_events=config.max_events)
        # processing intents that settle by themselves at a monotonic instant
        self._due_intents: dict[str, float] = {}
        self._versions: dict[str, list[tuple[float, Intent]]] = {}
        self._seq = itertools.count(1)

    # -- create ------------------------------------------------------------------------

    def validate_create(self, params: dict[str, Any]) -> CreateRequest:
        return validate_create(params, min_amount=self._config.min_amount)

    def execute_create(self, request: CreateRequest) -> Outcome:
        method = (
            self._resolve_payment_method(request.payment_method)
            if request.payment_method is not None
            else None
        )
        intent_id = objects.new_id("pi")
        intent = Intent(
            id=intent_id,
            seq=next(self._seq),
            created=int(time.time()),
            amount=request.amount,
            currency=request.currency,
            client_secret=f"{intent_id}_secret_{objects.random_token(25)}",
            status="requires_confirmation" if method else "requires_payment_method",
            metadata=dict(request.metadata),
            payment_method_types=list(request.payment_method_types),
            automatic_payment_methods=request.automatic_payment_methods,
            description=request.description,
            payment_method=method.id if method else None,
            confirmation_method=request.confirmation_method,
            capture_method=request.capture_method,
            customer=request.customer,
            receipt_email=request.receipt_email,
            statement_descriptor=request.statement_descriptor,
            statement_descriptor_suffix=request.statement_descriptor_suffix,
        )
        self._add(intent)
        self.events.emit(
            "payment_intent.created",
            objects.render_intent(intent),
            intent_id=intent.id,
            amount=intent.amount,
        )
        if request.confirm:
            return self.execute_confirm(
                intent.id,
                ConfirmRequest(
                    payment_method=None,
                    receipt_email=None,
                    return_url=request.return_url,
                ),
            )
        return self._intent_outcome(intent)

    # -- confirm -----------------------------------------------------------------------

    def validate_confirm(self, params: dict[str, Any]) -> ConfirmRequest:
        return validate_confirm(params)

    def execute_confirm(self, intent_id: str, request: ConfirmRequest) -> Outcome:
        intent = self._get(intent_id, param="intent", saved=True)
        if intent.status in _FINAL_STATUSES:
            verb = {"succeeded": "has already succeeded"}.get(
                intent.status, f"has a status of {intent.status}"
            )
            raise errors.unexpected_state(
                f"You cannot confirm this PaymentIntent because it {verb} after being "
                "previously confirmed.",
                objects.render_intent(intent),
            )
        if request.payment_method is not None:
            intent.payment_method = self._resolve_payment_method(request.payment_method).id
        if intent.payment_method is None:
            raise errors.unexpected_state(
                "You cannot confirm this PaymentIntent because it's missing a payment method. "
                "Update the PaymentIntent with a payment method and then confirm it again.",
                objects.render_intent(intent),
            )
        automatic = intent.automatic_payment_methods
        if (
            automatic
            and automatic.get("enabled")
            and automatic.get("allow_redirects") != "never"
            and not request.return_url
        ):
            # Stripe's real trap for server-side confirms: redirect-capable payment methods
            # need a return_url.  The adapter avoids it with payment_method_types=['card'].
            raise ApiError(
                400,
                errors.error_body(
                    "invalid_request_error",
                    "This PaymentIntent is configured to accept payment methods enabled in "
                    "your Dashboard, because some of these payment methods might redirect "
                    "your customer off of your page, you must provide a `return_url`. If you "
                    "don't want to accept redirect-based payment methods, set "
                    "`automatic_payment_methods[enabled]` to `true` and "
                    "`automatic_payment_methods[allow_redirects]` to `never` when creating "
                    "Setup Intents and Payment Intents.",
                    param="return_url",
                ),
                saved=True,
            )
        if request.receipt_email is not None:
            intent.receipt_email = request.receipt_email
        method = self.methods[intent.payment_method]
        card = method.card
        intent.off_session = request.off_session
        needs_authentication = card.authentication == "required" or (
            card.authentication == "on_setup" and not request.off_session
        )
        if needs_authentication and request.off_session:
            # Stripe's answer to an off-session payment the bank wants authenticated: a
            # decline the merchant must bring the customer back for.
            raise self._decline(intent, method, AUTHENTICATION_REQUIRED)
        if needs_authentication:
            return self._ask_for_authentication(intent, request.return_url)
        if card.settles is not None:
            intent.status = "processing"
            intent.next_action = None
            if self._config.processing_settle_seconds is not None:
                self._due_intents[intent.id] = (
                    time.monotonic() + self._config.processing_settle_seconds
                )
            self._changed(intent, "payment_intent.processing")
            return self._intent_outcome(intent)
        if card.decline is not None:
            raise self._decline(intent, method, card.decline)
        return self._charge(intent, method)

    def _ask_for_authentication(self, intent: Intent, return_url: str | None) -> Outcome:
        """``requires_action``: the customer must complete 3-D Secure.  With a return_url
        the merchant redirects the customer (``redirect_to_url``); without one Stripe.js
        handles it in the page (``use_stripe_sdk``)."""
        hosted = (
            "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_payorchsim"
            f"&payment_intent={intent.id}&payment_intent_client_secret={intent.client_secret}"
        )
        if return_url:
            intent.next_action = {
                "type": "redirect_to_url",
                "redirect_to_url": {"return_url": return_url, "url": hosted},
            }
        else:
            intent.next_action = {
                "type": "use_stripe_sdk",
                "use_stripe_sdk": {
                    "source": objects.new_id("payatt"),
                    "stripe_js": hosted,
                    "type": "three_d_secure_redirect",
                },
            }
        intent.status = "requires_action"
        self._changed(intent, "payment_intent.requires_action")
        return self._intent_outcome(intent)

    def _charge(self, intent: Intent, method: PaymentMethod) -> Outcome:
        """The card pays: one charge, ONE money movement (an authorisation when manual)."""
        charge_id = objects.new_id("ch")
        record_id = intent.metadata.get(keys.RECORD_ID_METADATA_KEY)
        intent.latest_charge = charge_id
        manual = intent.capture_method == "manual"
        intent.status = "requires_capture" if manual else "succeeded"
        intent.amount_received = 0 if manual else intent.amount
        intent.amount_capturable = intent.amount if manual else 0
        intent.last_payment_error = None
        intent.next_action = None
        self.charges[charge_id] = Charge(
            id=charge_id,
            intent_id=intent.id,
            record_id=record_id,
            amount=intent.amount,
            currency=intent.currency,
            created=int(time.time()),
            payment_method=method.id,
            captured=not manual,
            amount_captured=0 if manual else intent.amount,
        )
        if not manual:
            self._book_charge(self.charges[charge_id])
        self.movements.append(
            Movement(
                seq=len(self.movements) + 1,
                at=time.time(),
                charge_id=charge_id,
                intent_id=intent.id,
                record_id=record_id,
                amount=intent.amount,
                currency=intent.currency,
            )
        )
        self._changed(
            intent,
            "payment_intent.amount_capturable_updated" if manual else "payment_intent.succeeded",
        )
        return self._intent_outcome(intent)

    def _decline(self, intent: Intent, method: PaymentMethod, decline: CardDecline) -> ApiError:
        """The card is declined: the intent returns to requires_payment_method with the
        failed charge in last_payment_error.  Returns Stripe's 402 for the caller to raise
        (a confirm) or drop (an authentication or settlement that happened later)."""
        charge_id = objects.new_id("ch")
        record_id = intent.metadata.get(keys.RECORD_ID_METADATA_KEY)
        intent.latest_charge = charge_id
        payment_method = objects.render_payment_method(method)
        intent.status = "requires_payment_method"
        intent.payment_method = None
        intent.next_action = None
        intent.last_payment_error = {
            "charge": charge_id,
            "code": decline.code,
            "decline_code": decline.decline_code,
            "doc_url": "https://stripe.com/docs/error-codes/" + decline.code.replace("_", "-"),
            "message": decline.message,
            "payment_method": payment_method,
            "type": "card_error",
        }
        self.declines.append(
            Decline(
                seq=len(self.declines) + 1,
                at=time.time(),
                charge_id=charge_id,
                intent_id=intent.id,
                record_id=record_id,
                amount=intent.amount,
                currency=intent.currency,
                code=decline.code,
                decline_code=decline.decline_code,
            )
        )
        self._changed(intent, "payment_intent.payment_failed")
        return ApiError(
            402,
            errors.error_body(
                "card_error",
                decline.message,
                code=decline.code,
                charge=charge_id,
                decline_code=decline.decline_code,
                payment_intent=objects.render_intent(intent),
                payment_method=payment_method,
                request_log_url="https://dashboard.stripe.com/test/logs",
            ),
            saved=True,
        )

    # -- what the customer does: 3-D Secure (test-only, /_sim) -----------------------------

    def authenticate(self, intent_id: str, *, succeed: bool) -> dict[str, Any]:
        """The customer completes (or fails) the authentication an intent waits for."""
        intent = self.intents.get(intent_id)
        if intent is None:
            raise KeyError(intent_id)
        if intent.status != "requires_action":
            raise ValueError(f"{intent_id} is {intent.status}, not requires_action")
        assert intent.payment_method is not None
        method = self.methods[intent.payment_method]
        if not succeed:
            intent.status = "requires_payment_method"
            intent.next_action = None
            intent.payment_method = None
            intent.last_payment_error = {
                "code": "payment_intent_authentication_failure",
                "doc_url": "https://stripe.com/docs/error-codes/"
                "payment-intent-authentication-failure",
                "message": "The provided PaymentMethod has failed authentication. You can "
                "provide payment_method_data or a new PaymentMethod to attempt to fulfill this "
                "PaymentIntent again.",
                "payment_method": objects.render_payment_method(method),
                "type": "invalid_request_error",
            }
            self._changed(intent, "payment_intent.payment_failed")
        elif method.card.decline is not None:
            self._decline(intent, method, method.card.decline)  # declined after authenticating
        else:
            self._charge(intent, method)
        return objects.render_intent(intent)

    # -- an authorisation that was never captured ------------------------------------------

    def expire_authorization(self, intent_id: str) -> dict[str, Any]:
        """Stripe cancels an uncaptured authorisation after 7 days (``cancellation_reason:
        automatic``): the simulator does it when told."""
        intent = self.intents.get(intent_id)
        if intent is None:
            raise KeyError(intent_id)
        if intent.status != "requires_capture":
            raise ValueError(f"{intent_id} is {intent.status}, not requires_capture")
        self.execute_cancel(intent_id, CancelRequest(cancellation_reason="automatic"))
        return objects.render_intent(intent)

    # -- asynchronous payment methods ----------------------------------------------------

    def settle_intent(self, intent_id: str, outcome: str | None = None) -> dict[str, Any]:
        """A ``processing`` intent settles: ``succeeded`` or ``failed`` (default: what its
        payment method does)."""
        intent = self.intents.get(intent_id)
        if intent is None:
            raise KeyError(intent_id)
        if intent.status != "processing":
            raise ValueError(f"{intent_id} is {intent.status}, not processing")
        assert intent.payment_method is not None
        method = self.methods[intent.payment_method]
        target = outcome or method.card.settles or "succeeded"
        if target not in ("succeeded", "failed"):
            raise ValueError(f"an intent settles as succeeded or failed, not {target!r}")
        self._due_intents.pop(intent_id, None)
        if target == "failed":
            self._decline(intent, method, method.card.decline or _ASYNC_FAILURE)
        else:
            self._charge(intent, method)
        return objects.render_intent(intent)

    # -- capture / cancel --------------------------------------------------------------

    def validate_capture(self, params: dict[str, Any]) -> CaptureRequest:
        return validate_capture(params)

    def validate_cancel(self, params: dict[str, Any]) -> CancelRequest:
        return validate_cancel(params)

    def execute_capture(self, intent_id: str, request: CaptureRequest) -> Outcome:
        intent = self._get(intent_id, param="intent", saved=True)
        if intent.status != "requires_capture":
            raise errors.unexpected_state(
                "This PaymentIntent could not be captured because it has a status of "
                f"{intent.status}. Only a PaymentIntent with one of the following statuses "
                "may be captured: requires_capture.",
                objects.render_intent(intent),
            )
        amount = (
            intent.amount_capturable
            if request.amount_to_capture is None
            else (request.amount_to_capture)
        )
        if amount > intent.amount_capturable:
            raise ApiError(
                400,
                errors.error_body(
                    "invalid_request_error",
                    f"The amount to capture ({amount}) must be less than or equal to the "
                    f"PaymentIntent's amount_capturable ({intent.amount_capturable}).",
                    code="amount_too_large",
                    param="amount_to_capture",
                ),
                saved=True,
            )
        if amount < self._config.min_amount:
            # A partial capture is a charge of that amount: under the minimum charge it is
            # refused, and the authorisation stays capturable.
            raise ApiError(
                400,
                errors.error_body(
                    "invalid_request_error",
                    f"Amount must be at least {self._config.min_amount} minor units",
                    code="amount_too_small",
                    param="amount_to_capture",
                ),
                saved=True,
            )
        assert intent.latest_charge is not None
        charge = self.charges[intent.latest_charge]
        charge.captured = True
        charge.amount_captured = amount
        self._book_charge(charge)
        intent.status = "succeeded"
        intent.amount_received = amount
        intent.amount_capturable = 0
        intent.metadata.update(request.metadata)
        self.captures.append(
            Capture(
                seq=len(self.captures) + 1,
                at=time.time(),
                charge_id=charge.id,
                intent_id=intent.id,
                record_id=charge.record_id,
                amount=amount,
                currency=intent.currency,
            )
        )
        self._changed(intent, "payment_intent.succeeded")
        return self._intent_outcome(intent)

    def execute_cancel(self, intent_id: str, request: CancelRequest) -> Outcome:
        intent = self._get(intent_id, param="intent", saved=True)
        if intent.status not in _CANCELABLE:
            raise errors.unexpected_state(
                "You cannot cancel this PaymentIntent because it has a status of "
                f"{intent.status}. Only a PaymentIntent with one of the following statuses "
                f"may be canceled: {', '.join(_CANCELABLE)}.",
                objects.render_intent(intent),
            )
        if intent.status == "requires_capture" and intent.latest_charge is not None:
            self.charges[intent.latest_charge].released = True
        intent.status = "canceled"
        intent.amount_capturable = 0
        intent.canceled_at = int(time.time())
        intent.cancellation_reason = request.cancellation_reason
        intent.next_action = None
        self._due_intents.pop(intent.id, None)
        self._changed(intent, "payment_intent.canceled")
        return self._intent_outcome(intent)

    # -- what happens on its own later ---------------------------------------------------

    def on_refund_changed(self, refund: Refund, *, previous: str | None) -> None:
        """A refund was made or moved on: Stripe's events for it (each with its own
        snapshot of the refund)."""

        def emit(type_: str, obj: dict[str, Any], **extra: Any) -> None:
            self.events.emit(type_, obj, intent_id=refund.intent_id, amount=refund.amount, **extra)

        self._book_refund(refund)

        if previous is None:
            charge = self.charges[refund.charge_id]
            emit("refund.created", objects.render_refund(refund))
            # The charge's amount_refunded changed (partial refunds included).
            refunds = self.refunds.of_charge(charge.id)
            emit("charge.refunded", objects.render_charge(charge, refunds))
            return
        for type_ in ("charge.refund.updated", "refund.updated"):
            emit(type_, objects.render_refund(refund), previous_attributes={"status": previous})
        if refund.status == "failed":
            emit("refund.failed", objects.render_refund(refund))

    def balance_source(self, source: str) -> dict[str, Any]:
        """A balance transaction's source object (a charge or refund), for ``expand``."""
        refund = self.refunds.refunds.get(source)
        if refund is not None:
            return objects.render_refund(refund)
        charge = self.charges[source]
        return objects.render_charge(charge, self.refunds.of_charge(charge.id))

    def _book_charge(self, charge: Charge) -> None:
        # The id the charge object names (``objects.render_charge``).
        self.balance.book(
            f"txn_{charge.id[3:]}", "charge", charge.amount_captured, charge.currency, charge.id
        )

    def _book_refund(self, refund: Refund) -> None:
        # The ids the refund object names (``objects.render_refund``): a refund's money left
        # the balance once it succeeded (a failed one had succeeded first), and came back
        # when it failed.
        if refund.status in ("succeeded", "failed"):
            self.balance.book(
                f"txn_{refund.id[3:]}", "refund", -refund.amount, refund.currency, refund.id
            )
        if refund.status == "failed":
            self.balance.book(
                f"txn_f{refund.id[4:]}", "refund_failure", refund.amount, refund.currency, refund.id
            )

    def open_dispute(
        self, intent_id: str, *, amount: int | None = None, reason: str = "fraudulent"
    ) -> dict[str, Any]:
        """The customer disputes the charge (Stripe's Dashboard / card network)."""
        intent = self.intents.get(intent_id)
        if intent is None:
            raise KeyError(intent_id)
        charge = self.charges.get(intent.latest_charge or "")
        if charge is None or not charge.captured:
            raise ValueError(f"{intent_id} has no captured charge to dispute")
        dispute = Dispute(
            id=objects.new_id("dp"),
            charge_id=charge.id,
            intent_id=intent.id,
            amount=charge.amount_captured if amount is None else amount,
            currency=charge.currency,
            created=int(time.time()),
            reason=reason,
        )
        self.disputes[dispute.id] = dispute
        charge.disputed = True
        rendered = objects.render_dispute(dispute)
        self.events.emit(
            "charge.dispute.created", rendered, intent_id=intent.id, amount=dispute.amount
        )
        return rendered

    def settle_due(self, now: float) -> None:
        """Everything whose configured delay has passed moves on (refunds, processing)."""
        self.refunds.settle_due(now)
        for intent_id, due in list(self._due_intents.items()):
            if due <= now:
                self.settle_intent(intent_id)

    def _changed(self, intent: Intent, event_type: str) -> None:
        """An intent changed: a version for search, and Stripe's event."""
        self._remember(intent)
        self.events.emit(
            event_type, objects.render_intent(intent), intent_id=intent.id, amount=intent.amount
        )

    # -- reads -------------------------------------------------------------------------

    def retrieve(self, intent_id: str, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, frozenset({"client_secret"}))
        return self._intent_outcome(self._get(intent_id, param="intent", saved=False))

    def list_intents(self, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, _LIST_PARAMS)
        limit = params_.limit(params)
        earliest, latest = params_.created_range(params_.created_bounds(params))
        # Newest first by ``created``, like Stripe; ``seq`` orders intents of the same second.
        # ``_ordered`` is oldest first: the window and the anchors are found by bisection, so
        # a page costs its own length, not the account's (a worker's lookups page through
        # lists after every unknown outcome of an outage).
        start = bisect.bisect_left(self._ordered, (earliest, -math.inf), key=_order)
        end = bisect.bisect_right(self._ordered, (latest, math.inf), key=_order)
        starting_after = params_.string(params, "starting_after")
        ending_before = params_.string(params, "ending_before")
        if starting_after is not None:
            anchor = _order(self._get(starting_after, param="starting_after", saved=False))
            end = min(end, bisect.bisect_left(self._ordered, anchor, key=_order))
            page = self._ordered[max(start, end - limit) : end]
        elif ending_before is not None:
            anchor = _order(self._get(ending_before, param="ending_before", saved=False))
            start = max(start, bisect.bisect_right(self._ordered, anchor, key=_order))
            page = self._ordered[start : max(start, min(end, start + limit))]
        else:
            page = self._ordered[max(start, end - limit) : end]
        return Outcome(
            200,
            objects.render_list(
                "/v1/payment_intents",
                [objects.render_intent(i) for i in reversed(page)],
                has_more=max(0, end - start) > len(page),
            ),
            intent_id=None,
            record_id=None,
        )

    def search(self, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, _SEARCH_PARAMS)
        query = params_.string(params, "query")
        if query is None:
            raise errors.parameter_missing("query")
        try:
            clauses = parse_query(query)
        except SearchQueryError as exc:
            raise errors.invalid_request(str(exc), param="query") from exc
        limit = params_.limit(params)
        page_token = params_.string(params, "page")
        offset = 0
        if page_token:
            if not page_token.startswith("simpage_") or not page_token[8:].isdigit():
                raise errors.invalid_request(f"Invalid page: {page_token}", param="page")
            offset = int(page_token[8:])
        horizon = time.monotonic() - self._config.search_lag_seconds
        visible = [v for i in reversed(self._ordered) if (v := self._visible(i.id, horizon))]
        hits = [v for v in visible if all(c.matches(v) for c in clauses)]
        page = hits[offset : offset + limit]
        has_more = len(hits) > offset + limit
        return Outcome(
            200,
            objects.render_search_result(
                "/v1/payment_intents/search",
                [objects.render_intent(i) for i in page],
                has_more=has_more,
                next_page=f"simpage_{offset + limit}" if has_more else None,
            ),
            intent_id=None,
            record_id=None,
        )

    # -- seeding (tests: a busy account, intents made outside payorch) -------------------

    def seed_intent(
        self,
        *,
        amount: int,
        currency: str = "usd",
        metadata: dict[str, str] | None = None,
        payment_method: str | None = "pm_card_visa",
        created: int | None = None,
    ) -> str:
        """An intent made by someone else on the same account (another integration, the
        Dashboard): unconfirmed, with a payment method, so confirming it would charge."""
        method = self._resolve_payment_method(payment_method) if payment_method else None
        intent_id = objects.new_id("pi")
        self._add(
            Intent(
                id=intent_id,
                seq=next(self._seq),
                created=int(time.time()) if created is None else created,
                amount=amount,
                currency=currency,
                client_secret=f"{intent_id}_secret_{objects.random_token(25)}",
                status="requires_confirmation" if method else "requires_payment_method",
                metadata=dict(metadata or {}),
                payment_method_types=["card"],
                automatic_payment_methods=None,
                payment_method=method.id if method else None,
            )
        )
        return intent_id

    def seed_intents(
        self, count: int, *, amount: int = 1000, created_from: int, created_step: float = 0.0
    ) -> None:
        """``count`` unrelated intents, created from ``created_from`` on (a busy account)."""
        for n in range(count):
            self.seed_intent(
                amount=amount, payment_method=None, created=int(created_from + n * created_step)
            )

    # -- helpers -----------------------------------------------------------------------

    def _add(self, intent: Intent) -> None:
        self.intents[intent.id] = intent
        bisect.insort(self._ordered, intent, key=_order)
        self._remember(intent)

    def intent_amount(self, intent_id: str) -> int | None:
        intent = self.intents.get(intent_id)
        return intent.amount if intent else None

    def intent_record_id(self, intent_id: str) -> str | None:
        intent = self.intents.get(intent_id)
        return intent.metadata.get(keys.RECORD_ID_METADATA_KEY) if intent else None

    def _get(self, intent_id: str, *, param: str, saved: bool) -> Intent:
        intent = self.intents.get(intent_id)
        if intent is None:
            raise errors.resource_missing("payment_intent", intent_id, param, saved=saved)
        return intent

    def _resolve_payment_method(self, reference: str) -> PaymentMethod:
        existing = self.methods.get(reference)
        if existing is not None:
            return existing
        card = TEST_CARDS.get(reference)
        if card is None:
            raise errors.resource_missing("PaymentMethod", reference, "payment_method", saved=True)
        # A test token becomes a fresh PaymentMethod, as on Stripe.
        method = PaymentMethod(
            id=objects.new_id("pm"), token=reference, card=card, created=int(time.time())
        )
        self.methods[method.id] = method
        return method

    def _remember(self, intent: Intent) -> None:
        """Keep a version for the eventually consistent search view."""
        now = time.monotonic()
        versions = self._versions.setdefault(intent.id, [])
        versions.append((now, copy.copy(intent)))
        horizon = now - self._config.search_lag_seconds
        # Drop versions that a newer, already visible version hides for good.
        while len(versions) > 1 and versions[1][0] <= horizon:
            versions.pop(0)

    def _visible(self, intent_id: str, horizon: float) -> Intent | None:
        for written_at, version in reversed(self._versions.get(intent_id, [])):
            if written_at <= horizon:
                return version
        return None

    def _intent_outcome(self, intent: Intent) -> Outcome:
        return Outcome(
            200,
            objects.render_intent(intent),
            intent_id=intent.id,
            record_id=intent.metadata.get(keys.RECORD_ID_METADATA_KEY),
        )


def _order(intent: Intent) -> tuple[float, float]:
    return (intent.created, intent.seq)
