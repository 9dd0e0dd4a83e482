"""One Adyen simulator instance: the pipeline every Checkout request goes through.

    arrive ─> log ─> X-API-Key (401) ─> JSON body (400 702) ─> merchantAccount (400 / 403)
      ─> pick a fault
      rate_limit        ─> 429                      (nothing done, nothing saved)
      error_500_before  ─> 5xx                      (nothing done, nothing saved)
      hang              ─> stall "forever", then 5xx (nothing done)
      hold              ─> wait while the client does (its going away ends it), then 5xx
                           (nothing done, the key never claimed)
    Idempotency-Key (≤ 64)
      idempotency_unavailable ─> 503 703 transient (nothing done, nothing saved)
      ─> replay the saved answer / 422 704 while in flight / claim
      latency           ─> sleep while the key is held (a concurrent twin gets 704)
    execute (validate, then the effect, atomic under the lock) ─> save the answer under the key
      error_500_after   ─> answer 5xx (the effect and the real answer stay saved)
      timeout_after_effect ─> stall before answering (the effect and answer are saved)
    answer ─> log status

The lock is a ``threading.Lock`` held only around synchronous sections (never across an
``await``).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response

from devtools.adyen_simulator import errors
from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.errors import AdyenError
from devtools.adyen_simulator.faults import Fault, FaultBook, Operation
from devtools.adyen_simulator.idempotency import (
    Fresh,
    IdempotencyStore,
    InFlight,
    Replay,
    SavedResponse,
)
from devtools.adyen_simulator.notifications import NotificationSender
from devtools.adyen_simulator.settlement import Batch, close_batch, report_lines
from devtools.adyen_simulator.state import AccountState, new_psp_reference
from devtools.stalls import Stalls

MAX_IDEMPOTENCY_KEY_LENGTH = 64
_STALL_POLL_SECONDS = 0.05
_JSON = "application/json;charset=UTF-8"


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    replayed: bool = False

    def encoded(self) -> bytes:
        return json.dumps(self.body).encode()


def answer_from_error(error: AdyenError) -> Answer:
    return Answer(error.status, error.body(), headers=dict(error.headers))


@dataclass
class LoggedRequest:
    seq: int
    at: float
    method: str
    path: str
    operation: str
    idempotency_key: str | None
    reference: str | None = None
    psp_reference: str | None = None
    status: int | None = None
    replayed: bool = False
    fault: str | None = None
    # The caller's "host:port": which process holds a held call is its socket's owner.
    client: str | None = None
    # A ``hold`` fault: ``holding``, then why it ended (``client_gone``, ``timed_out``,
    # ``released`` when the simulator stops).
    hold: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "method": self.method,
            "path": self.path,
            "operation": self.operation,
            "idempotency_key": self.idempotency_key,
            "reference": self.reference,
            "psp_reference": self.psp_reference,
            "status": self.status,
            "replayed": self.replayed,
            "fault": self.fault,
            "client": self.client,
            "hold": self.hold,
        }


class AdyenSimulator:
    def __init__(self, config: AdyenSimulatorConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._stalls = Stalls()
        self.faults = FaultBook(seed=config.seed)
        self.notifications = NotificationSender(
            self.faults,
            retry_seconds=config.notification_retry_seconds,
            max_attempts=config.notification_max_attempts,
            reorder_hold_seconds=config.notification_reorder_hold_seconds,
        )
        self._start_fresh()

    def _start_fresh(self) -> None:
        self.notifications.forget()
        self.notifications.configure(
            self.config.notification_url,
            self.config.hmac_key,
            basic_auth=self.config.notification_basic_auth,
            reorder_hold_seconds=self.config.notification_reorder_hold_seconds,
        )
        self.state = AccountState(self.config, self._notify)
        self.batches: list[Batch] = []
        self._keys = IdempotencyStore(self.config.idempotency_ttl_seconds)
        self._log: deque[LoggedRequest] = deque(maxlen=self.config.max_logged_requests)
        self._seq = itertools.count(1)
        self.faults.clear()
        self.faults.reseed(self.config.seed)
        for rule in self.config.faults:
            self.faults.add(rule)

    def _notify(self, item: dict[str, Any]) -> None:
        delay = (
            0.0 if item["eventCode"] == "AUTHORISATION" else self.config.modification_delay_seconds
        )
        self.notifications.enqueue(item, delay_seconds=delay)

    # -- admin -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything: payments, keys, money, logs, notifications, run-time faults."""
        with self._lock:
            self._start_fresh()

    def release_stalls(self) -> None:
        """Let every stalled request answer now and stop delivering (used when stopping)."""
        self._stalls.release()
        self.notifications.stop()

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [e.to_json() for e in self._log]

    def payments(self, reference: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                p.to_json()
                for p in self.state.payments.values()
                if reference is None or p.reference == reference
            ]

    def movements(self) -> dict[str, Any]:
        with self._lock:
            return self.state.summary()

    def settle(self, psp_reference: str, *, authorised: bool) -> dict[str, Any]:
        with self._lock:
            return self.state.settle(psp_reference, authorised=authorised)

    def chargeback(
        self, psp_reference: str, *, value: int | None, reason_code: str
    ) -> dict[str, Any]:
        with self._lock:
            return self.state.chargeback(psp_reference, value=value, reason_code=reason_code)

    def expire(self, psp_reference: str) -> dict[str, Any]:
        with self._lock:
            return self.state.expire(psp_reference)

    def close_batch(self) -> dict[str, Any]:
        """Close the open settlement batch (``settlement.py``)."""
        with self._lock:
            batch = close_batch(self.state, self.batches)
        return {"batch": batch.number, "rows": len(batch.movements)}

    def settlement_report(
        self, request: Request, merchant_account: str, number: int
    ) -> Iterator[str]:
        """Batch ``number``'s Settlement details report, a line at a time; raises
        ``AdyenError`` (401 without a known key, 403 for another merchant account, 404 for a
        batch not closed yet).  The batch is closed, so its lines never change: they are
        made outside the lock, as the client reads them."""
        self._authenticate(request)
        accepted = self.config.merchant_accounts
        if accepted and merchant_account not in accepted:
            raise errors.invalid_merchant_account(new_psp_reference())
        with self._lock:
            found = self.batches[number - 1] if 0 < number <= len(self.batches) else None
            state = self.state
        if found is None:
            raise errors.not_found("GET", str(request.url.path))
        return report_lines(state, found, merchant_account, self.config.report_time_zone)

    def fail_later(self, psp_reference: str, modification: str) -> dict[str, Any]:
        with self._lock:
            return self.state.fail_later(psp_reference, modification)

    # -- the pipeline ------------------------------------------------------------------

    async def handle(
        self, request: Request, operation: Operation, psp_reference: str | None = None
    ) -> Response:
        key = request.headers.get("idempotency-key") or None
        raw = await request.body()
        with self._lock:
            entry = LoggedRequest(
                next(self._seq),
                time.time(),
                request.method,
                request.url.path,
                operation,
                key,
                psp_reference=psp_reference,
                client=f"{request.client.host}:{request.client.port}" if request.client else None,
            )
            self._log.append(entry)
        try:
            answer = await self._run(request, raw, operation, psp_reference, key, entry)
        except AdyenError as error:
            answer = answer_from_error(error)
        body = answer.encoded()
        headers = dict(answer.headers)
        if key:
            headers["Idempotency-Key"] = key
        psp = answer.body.get("pspReference")
        if isinstance(psp, str):
            headers["pspReference"] = psp
        if self.config.answer_observer is not None:
            self.config.answer_observer(request.method, request.url.path, answer.status, raw, body)
        with self._lock:
            entry.status = answer.status
            entry.replayed = answer.replayed
            entry.psp_reference = entry.psp_reference or (psp if isinstance(psp, str) else None)
        return Response(body, status_code=answer.status, headers=headers, media_type=_JSON)

    async def _run(
        self,
        request: Request,
        raw: bytes,
        operation: Operation,
        psp_reference: str | None,
        key: str | None,
        entry: LoggedRequest,
    ) -> Answer:
        scope = self._authenticate(request)
        body = self._body(raw)
        # Every request names the merchant account, except /payments/details (its payment
        # already does).
        merchant = body.get("merchantAccount")
        if operation != "details":
            if not isinstance(merchant, str) or not merchant:
                raise errors.required_field("merchantAccount")
            if self.config.merchant_accounts and merchant not in self.config.merchant_accounts:
                raise errors.invalid_merchant_account(new_psp_reference())
        reference = body.get("reference")
        with self._lock:
            entry.reference = reference if isinstance(reference, str) else None
            amount = self._amount_hint(body, psp_reference)
        fault = self.faults.pick(operation, amount)
        if fault is not None:
            with self._lock:
                entry.fault = fault.mode
                # In the same section: the log never shows a hold fault not yet holding.
                entry.hold = "holding" if fault.mode == "hold" else None
            if fault.mode == "rate_limit":
                raise errors.rate_limited(fault.retry_after)
            if fault.mode == "error_500_before":
                raise errors.internal(fault.status)
            if fault.mode == "hang":
                await self._stall(fault.seconds, self.config.hang_seconds)
                raise errors.internal(fault.status)
            if fault.mode == "hold":
                await self._hold(request, entry, fault.seconds)
                raise errors.internal(fault.status)
        if key is not None:
            if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
                raise errors.idempotency_key_too_long()
            if fault is not None and fault.mode == "idempotency_unavailable":
                raise errors.idempotency_store_unavailable()
            answer = await self._run_idempotent(operation, psp_reference, body, key, scope, fault)
        else:
            if fault is not None and fault.mode == "latency":
                await anyio.sleep(fault.seconds or 0.0)
            with self._lock:
                answer = self._execute(operation, psp_reference, body)
        if fault is not None and fault.mode == "error_500_after":
            answer = answer_from_error(errors.internal(fault.status))
        if fault is not None and fault.mode == "timeout_after_effect":
            await self._stall(fault.seconds, self.config.stall_seconds)
        return answer

    async def _run_idempotent(
        self,
        operation: Operation,
        psp_reference: str | None,
        body: dict[str, Any],
        key: str,
        scope: str,
        fault: Fault | None,
    ) -> Answer:
        now = time.time()
        # Check and claim in one critical section: two concurrent twins never both execute.
        with self._lock:
            verdict = self._keys.check(scope, key, now)
            if isinstance(verdict, Replay):
                saved = verdict.response
                return Answer(
                    saved.status,
                    json.loads(saved.body),
                    headers=dict(saved.headers),
                    replayed=True,
                )
            if isinstance(verdict, InFlight):
                raise errors.idempotency_in_progress(self.config.idempotency_in_flight_status)
            assert isinstance(verdict, Fresh)
            self._keys.claim(scope, key, now)
        finished = False
        try:
            if fault is not None and fault.mode == "latency":
                await anyio.sleep(fault.seconds or 0.0)
            with self._lock:
                try:
                    answer = self._execute(operation, psp_reference, body)
                except AdyenError:
                    # A refused request never executed: nothing is saved under the key.
                    self._keys.abandon(scope, key)
                    finished = True
                    raise
                self._keys.save(
                    scope,
                    key,
                    SavedResponse(answer.status, answer.encoded(), tuple(answer.headers.items())),
                )
                finished = True
        finally:
            if not finished:
                with self._lock:
                    self._keys.abandon(scope, key)
        return answer

    def _execute(
        self, operation: Operation, psp_reference: str | None, body: dict[str, Any]
    ) -> Answer:
        state = self.state
        if operation == "payments":
            status, out = state.authorise(body)
        elif operation == "details":
            status, out = state.details(body)
        elif operation == "capture":
            status, out = state.capture(psp_reference, body)
        elif operation == "cancel":
            status, out = state.cancel(psp_reference, body)
        elif operation == "refund":
            status, out = state.refund(psp_reference, body)
        elif operation == "reversal":
            status, out = state.reversal(psp_reference, body)
        elif operation == "technical_cancel":
            status, out = state.technical_cancel(body)
        else:  # pragma: no cover - the routes name every operation
            raise errors.not_found("POST", operation)
        return Answer(status, out)

    def _amount_hint(self, body: dict[str, Any], psp_reference: str | None) -> int | None:
        amount = body.get("amount")
        if isinstance(amount, dict) and isinstance(amount.get("value"), int):
            return int(amount["value"])
        payment = self.state.payments.get(psp_reference or "")
        return payment.value if payment is not None else None

    async def _stall(self, seconds: float | None, default: float) -> None:
        await self._stalls.hold(default if seconds is None else seconds)

    async def _hold(self, request: Request, entry: LoggedRequest, seconds: float | None) -> None:
        """Hold a request that has done nothing (no effect, no key claimed) for as long as
        its client waits for it.

        Hazard: a held request must never act once its client is gone.  A chaos test kills
        the process that sent it and asserts the provider did nothing for it; acting on it
        after the kill would be another scenario ("acted, the answer lost").  So the hold
        ends only in a 5xx with nothing done, whichever way it ends, and a later request
        with the same key executes afresh (nothing was saved under it)."""
        deadline = time.monotonic() + (self.config.hang_seconds if seconds is None else seconds)
        ended = "released"
        while not self._stalls.released:
            if await request.is_disconnected():
                ended = "client_gone"
                break
            if time.monotonic() >= deadline:
                ended = "timed_out"
                break
            await anyio.sleep(_STALL_POLL_SECONDS)
        with self._lock:
            entry.hold = ended

    def _authenticate(self, request: Request) -> str:
        """The idempotency scope: the API key, or the basic-auth user (Adyen takes both)."""
        api_key = request.headers.get("x-api-key", "").strip()
        if api_key:
            if self.config.api_keys and api_key not in self.config.api_keys:
                raise errors.unauthorized()
            return api_key
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "basic" and not self.config.api_keys:
            try:
                user, _, password = base64.b64decode(credential).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user, password = "", ""
            if user and password:
                return f"basic:{user}"
        raise errors.unauthorized()

    @staticmethod
    def _body(raw: bytes) -> dict[str, Any]:
        try:
            body: Any = json.loads(raw) if raw.strip() else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise errors.malformed_json(str(exc)) from exc
        if not isinstance(body, dict):
            raise errors.malformed_json("expected a JSON object")
        return body
