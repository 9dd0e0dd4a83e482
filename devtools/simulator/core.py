"""One simulator instance: the request pipeline every Stripe endpoint goes through.

    arrive ─> log ─> authenticate (401) ─> decode params ─> pick a fault
      rate_limit        ─> 429 + Retry-After           (nothing done, nothing saved)
      error_500_before  ─> 500 api_error               (nothing done, nothing saved)
      hang              ─> stall "forever"             (nothing done)
    POST with Idempotency-Key ─> replay / 409 / idempotency_error / validate + claim
      latency           ─> sleep while the key is held (a concurrent twin gets 409)
    execute (effect, atomic under the lock) ─> save the answer under the key
      error_500_after   ─> the saved answer is a 500 (the effect stays)
      timeout_after_effect ─> stall before answering (the effect and answer are saved)
    answer ─> log status

The lock is a ``threading.Lock`` held only around synchronous sections (never across an
``await``), so it is cheap under one event loop and still correct when the app is driven from
several threads (e.g. Starlette's TestClient).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from devtools.simulator import errors, objects
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.errors import ApiError
from devtools.simulator.events import RequestContext
from devtools.simulator.faults import Fault, FaultBook, Operation
from devtools.simulator.forms import FormError, decode_form
from devtools.simulator.idempotency import (
    Fresh,
    IdempotencyStore,
    InFlight,
    Mismatch,
    Replay,
    SavedResponse,
    fingerprint,
)
from devtools.simulator.intent_requests import amount_hint
from devtools.simulator.models import Outcome
from devtools.simulator.refunds import RefundRequest
from devtools.simulator.requestlog import LoggedRequest, RequestLog
from devtools.simulator.state import PaymentState
from devtools.simulator.webhooks import WebhookSender
from devtools.stalls import Stalls
from orchestrator.providers import keys

_TEST_KEY = re.compile(r"^sk_test_[A-Za-z0-9_]+$")


@dataclass
class Answer:
    status: int
    body: bytes
    request_id: str = field(default_factory=objects.new_request_id)
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False
    intent_id: str | None = None
    record_id: str | None = None


def _encode(body: dict[str, Any]) -> bytes:
    # Compact on purpose: ``indent`` forces json's pure-Python encoder, several times slower.
    return json.dumps(body).encode()


def answer_from_error(error: ApiError) -> Answer:
    intent = error.body.get("error", {}).get("payment_intent")
    intent_id = intent.get("id") if isinstance(intent, dict) else None
    record_id = (
        intent.get("metadata", {}).get(keys.RECORD_ID_METADATA_KEY)
        if isinstance(intent, dict)
        else None
    )
    return Answer(
        error.status,
        _encode(error.body),
        headers=dict(error.headers),
        intent_id=intent_id,
        record_id=record_id,
    )


def _answer_from_outcome(outcome: Outcome) -> Answer:
    return Answer(
        outcome.status,
        _encode(outcome.body),
        intent_id=outcome.intent_id,
        record_id=outcome.record_id,
    )


class Simulator:
    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._stalls = Stalls()
        self.faults = FaultBook(seed=config.seed)
        self.webhooks = WebhookSender(
            self.faults,
            retry_seconds=config.webhook_retry_seconds,
            max_attempts=config.webhook_max_attempts,
            reorder_hold_seconds=config.webhook_reorder_hold_seconds,
        )
        self._start_fresh()

    def _start_fresh(self) -> None:
        self.webhooks.forget()
        self.webhooks.configure(
            self.config.webhook_url,
            self.config.webhook_secret,
            reorder_hold_seconds=self.config.webhook_reorder_hold_seconds,
        )
        self.state = PaymentState(self.config)
        self.state.events.sender = self.webhooks
        self._keys = IdempotencyStore(self.config.idempotency_ttl_seconds)
        self._log = RequestLog(self.config.max_logged_requests)
        self.faults.clear()
        self.faults.reseed(self.config.seed)
        for rule in self.config.faults:
            self.faults.add(rule)

    # -- admin -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything: intents, keys, money, the request log, run-time faults."""
        with self._lock:
            self._start_fresh()

    def release_stalls(self) -> None:
        """Let every stalled or hanging request answer now, and stop delivering webhooks
        (used when stopping)."""
        self._stalls.release()
        self.webhooks.stop()

    # -- test-only actions (``/_sim``): the customer, the bank, the Dashboard ------------

    def authenticate(self, intent_id: str, *, succeed: bool) -> dict[str, Any]:
        with self._lock, self._automatic():
            return self.state.authenticate(intent_id, succeed=succeed)

    def settle_intent(self, intent_id: str, outcome: str | None) -> dict[str, Any]:
        with self._lock, self._automatic():
            return self.state.settle_intent(intent_id, outcome)

    def expire_authorization(self, intent_id: str) -> dict[str, Any]:
        with self._lock, self._automatic():
            return self.state.expire_authorization(intent_id)

    def open_dispute(self, intent_id: str, amount: int | None, reason: str) -> dict[str, Any]:
        with self._lock, self._automatic():
            return self.state.open_dispute(intent_id, amount=amount, reason=reason)

    def adjust_balance(self, source: str, amount: int) -> dict[str, Any]:
        """The balance transaction of a charge or refund now says ``amount`` (tests)."""
        with self._lock:
            return self.state.balance.adjust(source, amount)

    @contextmanager
    def _automatic(self) -> Iterator[None]:
        """Changes no API request caused: their events name no request."""
        self.state.events.request = RequestContext()
        yield

    def requests(
        self, *, intent_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            return self._log.entries(intent_id=intent_id, record_id=record_id)

    def movements(self) -> dict[str, Any]:
        with self._lock:
            self.state.settle_due(time.monotonic())
            charges = list(self.state.movements)
            declines = list(self.state.declines)
            captures = list(self.state.captures)
            refunds = self.state.refunds.summary()
        amount: Counter[str] = Counter()
        by_intent: Counter[str] = Counter()
        by_record: Counter[str] = Counter()
        for charge in charges:
            amount[charge.currency] += charge.amount
            by_intent[charge.intent_id] += 1
            if charge.record_id is not None:
                by_record[charge.record_id] += 1
        declined_by_intent: Counter[str] = Counter(d.intent_id for d in declines)
        declined_by_record: Counter[str] = Counter(
            d.record_id for d in declines if d.record_id is not None
        )
        intents_by_record: defaultdict[str, list[str]] = defaultdict(list)
        for charge in charges:
            if charge.record_id is not None:
                intents_by_record[charge.record_id].append(charge.intent_id)
        return {
            "total": len(charges),
            "amount": dict(amount),
            "by_intent": dict(by_intent),
            "by_record": dict(by_record),
            "charges": [c.to_json() for c in charges],
            "declines": {
                "total": len(declines),
                "by_intent": dict(declined_by_intent),
                "by_record": dict(declined_by_record),
                "items": [d.to_json() for d in declines],
            },
            # A capture moves an authorisation's money (manual capture); a charge under
            # automatic capture is in ``charges`` only.
            "captures": {
                "total": len(captures),
                "by_intent": dict(Counter(c.intent_id for c in captures)),
                "by_record": dict(Counter(c.record_id for c in captures if c.record_id)),
                "items": [c.to_json() for c in captures],
            },
            "refunds": refunds,
        }

    def settle_refund(self, refund_id: str, status: str | None) -> dict[str, Any]:
        """Move a pending or failing refund on now (``POST /_sim/refunds/{id}/settle``)."""
        with self._lock, self._automatic():
            refund = self.state.refunds.settle(refund_id, status)
            return objects.render_refund(refund)

    def dashboard_refund(
        self, intent_id: str, amount: int | None, reason: str | None
    ) -> tuple[int, dict[str, Any]]:
        """A refund made outside payorch, as in Stripe's Dashboard: Stripe's own checks,
        no idempotency key, no metadata of ours (``POST /_sim/dashboard/refunds``)."""
        with self._lock, self._automatic():
            request = RefundRequest(
                payment_intent=intent_id, charge=None, amount=amount, reason=reason, metadata={}
            )
            try:
                outcome = self.state.refunds.execute_create(request, origin="dashboard")
            except ApiError as error:
                return error.status, error.body
            return outcome.status, outcome.body

    def seed_intent(self, **fields: Any) -> str:
        """See ``PaymentState.seed_intent`` (tests: an intent made outside payorch)."""
        with self._lock:
            return self.state.seed_intent(**fields)

    def seed_intents(self, count: int, **fields: Any) -> None:
        """See ``PaymentState.seed_intents`` (tests: a busy account, in bulk)."""
        with self._lock:
            self.state.seed_intents(count, **fields)

    # -- the pipeline ------------------------------------------------------------------

    async def handle(
        self, request: Request, operation: Operation, intent_id: str | None = None
    ) -> Response:
        """One Stripe API request.  ``intent_id`` is the object the path names: a payment
        intent, or a refund for ``retrieve_refund``."""
        started = time.monotonic()
        method = request.method
        key = request.headers.get("idempotency-key") if method == "POST" else None
        with self._lock:
            # Whatever was due to happen by itself (a refund failing later) happens first.
            self.state.events.request = RequestContext()
            self.state.settle_due(started)
            entry = self._log.open(method, request.url.path, operation, key or None)
            if intent_id is not None and operation not in ("retrieve_refund", "retrieve_event"):
                entry.intent_id = intent_id
                entry.record_id = self.state.intent_record_id(intent_id)
        try:
            answer = await self._run(request, operation, intent_id, key or None, entry)
        except ApiError as error:
            answer = answer_from_error(error)
        headers = {
            "Request-Id": answer.request_id,
            "Stripe-Version": self.config.api_version,
            **answer.headers,
        }
        if key:
            headers["Idempotency-Key"] = key
        if self.config.answer_observer is not None:
            self.config.answer_observer(method, request.url.path, answer.status, answer.body)
        with self._lock:
            entry.status = answer.status
            entry.replayed = answer.replayed
            entry.intent_id = entry.intent_id or answer.intent_id
            entry.record_id = entry.record_id or answer.record_id
            entry.duration_ms = round((time.monotonic() - started) * 1000, 3)
        return Response(
            answer.body, status_code=answer.status, headers=headers, media_type="application/json"
        )

    async def _run(
        self,
        request: Request,
        operation: Operation,
        intent_id: str | None,
        key: str | None,
        entry: LoggedRequest,
    ) -> Answer:
        scope = self._authenticate(request)
        entry.key_last4 = scope[-4:]
        entry.stripe_account = request.headers.get("stripe-account")
        self._check_version(request)
        params = await self._params(request)
        with self._lock:
            if operation == "create":
                amount = amount_hint(params)
                metadata = params.get("metadata")
                if isinstance(metadata, dict):
                    record = metadata.get(keys.RECORD_ID_METADATA_KEY)
                    entry.record_id = record if isinstance(record, str) else None
            elif operation in ("refund", "list_refunds"):
                target = params.get("payment_intent")
                target = target if isinstance(target, str) else None
                if target is not None:
                    entry.intent_id = target
                    entry.record_id = self.state.intent_record_id(target)
                amount = amount_hint(params) if operation == "refund" else None
                if amount is None and target is not None:
                    amount = self.state.intent_amount(target)
            elif operation == "retrieve_refund":
                refund = self.state.refunds.refunds.get(intent_id or "")
                amount = refund.amount if refund is not None else None
            elif operation in ("list_events", "retrieve_event", "list_balance_transactions"):
                amount = None
            else:
                amount = self.state.intent_amount(intent_id) if intent_id else None
        fault = self.faults.pick(operation, amount)
        if fault is not None:
            with self._lock:
                entry.fault = fault.mode
            if fault.mode == "rate_limit":
                raise errors.rate_limited(fault.retry_after)
            if fault.mode == "error_500_before":
                raise errors.api_error(saved=False)
            if fault.mode == "hang":
                await self._stall(fault.seconds, self.config.hang_seconds)
                raise errors.api_error(saved=False)
        if request.method == "POST" and key is not None:
            if len(key) > 255:
                raise errors.invalid_request(
                    "Idempotency-Key must be 255 characters or fewer.", param="Idempotency-Key"
                )
            answer = await self._run_idempotent(
                request, operation, intent_id, key, scope, params, fault
            )
        else:
            answer = await self._run_plain(request, operation, intent_id, params, fault)
        if fault is not None and fault.mode == "timeout_after_effect":
            await self._stall(fault.seconds, self.config.stall_seconds)
        return answer

    async def _run_idempotent(
        self,
        request: Request,
        operation: Operation,
        intent_id: str | None,
        key: str,
        scope: str,
        params: dict[str, Any],
        fault: Fault | None,
    ) -> Answer:
        path = request.url.path
        print_ = fingerprint(params)
        now = time.time()
        # Hazard: check, validate and claim must be one critical section, or two concurrent
        # twins could both see "fresh" and both execute (a double charge).
        with self._lock:
            verdict = self._keys.check(scope, key, path, print_, now)
            if isinstance(verdict, Replay):
                saved = verdict.response
                return Answer(
                    saved.status,
                    saved.body,
                    headers={"Idempotent-Replayed": "true", "Original-Request": saved.request_id},
                    replayed=True,
                    intent_id=saved.intent_id,
                    record_id=saved.record_id,
                )
            if isinstance(verdict, InFlight):
                raise errors.idempotency_key_in_use(key)
            if isinstance(verdict, Mismatch):
                raise errors.idempotency_mismatch(key, verdict.first_path, path)
            assert isinstance(verdict, Fresh)
            validated = self._validate(operation, params)
            self._keys.claim(scope, key, path, print_, now)
        finished = False
        try:
            if fault is not None and fault.mode == "latency":
                await anyio.sleep(fault.seconds or 0.0)
            with self._lock:
                answer, saved_flag = self._execute(operation, intent_id, validated, params, key)
                if fault is not None and fault.mode == "error_500_after":
                    answer = answer_from_error(errors.api_error(saved=True))
                    saved_flag = True
                if saved_flag:
                    self._keys.save(
                        scope,
                        key,
                        SavedResponse(
                            answer.status,
                            answer.body,
                            answer.request_id,
                            answer.intent_id,
                            answer.record_id,
                        ),
                    )
                else:
                    self._keys.abandon(scope, key)
                finished = True
        finally:
            if not finished:
                with self._lock:
                    self._keys.abandon(scope, key)
        return answer

    async def _run_plain(
        self,
        request: Request,
        operation: Operation,
        intent_id: str | None,
        params: dict[str, Any],
        fault: Fault | None,
    ) -> Answer:
        if fault is not None and fault.mode == "latency":
            await anyio.sleep(fault.seconds or 0.0)
        with self._lock:
            validated = self._validate(operation, params)
            answer, _ = self._execute(operation, intent_id, validated, params)
        if fault is not None and fault.mode == "error_500_after":
            return answer_from_error(errors.api_error(saved=True))
        return answer

    def _validate(self, operation: Operation, params: dict[str, Any]) -> Any:
        if operation == "create":
            return self.state.validate_create(params)
        if operation == "confirm":
            return self.state.validate_confirm(params)
        if operation == "capture":
            return self.state.validate_capture(params)
        if operation == "cancel":
            return self.state.validate_cancel(params)
        if operation == "refund":
            return self.state.refunds.validate_create(params)
        return None

    def _execute(
        self,
        operation: Operation,
        intent_id: str | None,
        validated: Any,
        params: dict[str, Any],
        key: str | None = None,
    ) -> tuple[Answer, bool]:
        """Run the effect; returns the answer and whether Stripe would save it."""
        request_id = objects.new_request_id()
        # The events this request causes name it (and its key), as on Stripe.
        self.state.events.request = RequestContext(request_id, key)
        try:
            answer, saved = self._dispatch(operation, intent_id, validated, params)
        finally:
            self.state.events.request = RequestContext()
        answer.request_id = request_id
        return answer, saved

    def _dispatch(
        self, operation: Operation, intent_id: str | None, validated: Any, params: dict[str, Any]
    ) -> tuple[Answer, bool]:
        try:
            if operation == "create":
                outcome = self.state.execute_create(validated)
            elif operation == "confirm":
                assert intent_id is not None
                outcome = self.state.execute_confirm(intent_id, validated)
            elif operation == "capture":
                assert intent_id is not None
                outcome = self.state.execute_capture(intent_id, validated)
            elif operation == "cancel":
                assert intent_id is not None
                outcome = self.state.execute_cancel(intent_id, validated)
            elif operation == "refund":
                outcome = self.state.refunds.execute_create(validated)
            elif operation == "retrieve":
                assert intent_id is not None
                outcome = self.state.retrieve(intent_id, params)
            elif operation == "retrieve_refund":
                assert intent_id is not None
                outcome = self.state.refunds.retrieve(intent_id, params)
            elif operation == "list":
                outcome = self.state.list_intents(params)
            elif operation == "list_refunds":
                outcome = self.state.refunds.list_refunds(params)
            elif operation == "list_events":
                outcome = self.state.events.list_events(params)
            elif operation == "list_balance_transactions":
                outcome = self.state.balance.list_transactions(params, self.state.balance_source)
            elif operation == "retrieve_event":
                assert intent_id is not None
                outcome = self.state.events.retrieve(intent_id, params)
            else:
                outcome = self.state.search(params)
        except ApiError as error:
            return answer_from_error(error), error.saved
        return _answer_from_outcome(outcome), True

    async def _stall(self, seconds: float | None, default: float) -> None:
        await self._stalls.hold(default if seconds is None else seconds)

    def _check_version(self, request: Request) -> None:
        """Real Stripe answers any valid version, each with its own object shapes; the
        simulator speaks one (``config.api_version``, the version the adapter pins) and
        refuses every other, or a missing ``Stripe-Version``, with a 400: a client that
        drifted fails loudly instead of being served shapes written for another version."""
        sent = request.headers.get("stripe-version")
        if sent != self.config.api_version:
            raise errors.invalid_request(
                f"Unexpected Stripe-Version {sent!r}: the payorch simulator speaks "
                f"{self.config.api_version!r} only (see orchestrator/stripe_version.py)",
                code="api_version_unexpected",
                param="Stripe-Version",
            )

    @staticmethod
    def _authenticate(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        api_key = ""
        if scheme.lower() == "bearer":
            api_key = credential.strip()
        elif scheme.lower() == "basic":
            try:
                api_key = base64.b64decode(credential).decode().partition(":")[0]
            except (binascii.Error, UnicodeDecodeError):
                api_key = credential
        if not api_key:
            raise errors.authentication_failed(
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
                "YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for "
                "details, or we can help at https://support.stripe.com/."
            )
        if not _TEST_KEY.match(api_key):
            masked = api_key[:8] + "*" * max(len(api_key) - 12, 0) + api_key[-4:]
            raise errors.authentication_failed(f"Invalid API Key provided: {masked}")
        return api_key

    @staticmethod
    async def _params(request: Request) -> dict[str, Any]:
        try:
            if request.method == "POST":
                raw = (await request.body()).decode("utf-8")
                return decode_form(raw)
            return decode_form(request.url.query)
        except (FormError, UnicodeDecodeError) as exc:
            raise errors.invalid_request(str(exc)) from exc
