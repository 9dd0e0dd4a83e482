"""Webhook delivery: every event, POSTed to the configured endpoint and signed exactly as
Stripe signs (``Stripe-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed
with the endpoint's whsec_ secret>``), with delivery faults.

    event ─> queue ─> sender thread ─> pick a webhook fault (FaultBook, operation "webhook")
      drop        never delivered (logged as dropped)
      duplicate   delivered twice (the same event id, signed twice)
      reorder     held back and delivered after the next event (or after
                  ``reorder_hold_seconds`` if none follows)
      delay       delivered ``seconds`` later (others overtake it)
    POST ─> 2xx: delivered;  anything else or no answer: retried after ``retry_seconds``,
            up to ``max_attempts`` (Stripe retries for days; tests need seconds)

Signing is written here, not borrowed: the simulator must not import ``stripe`` (it is the
SDK's counterpart), and the tests verify every signature with ``stripe.Webhook.construct_event``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx

from devtools.simulator.events import StoredEvent
from devtools.simulator.faults import FaultBook

# One delivery attempt's timeout: Stripe gives an endpoint a few seconds.
_DELIVERY_TIMEOUT_SECONDS = 5.0
_USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"


def signature_header(payload: bytes, secret: str, timestamp: int) -> str:
    """Stripe's ``Stripe-Signature`` for ``payload`` signed at ``timestamp``."""
    signed = f"{timestamp}.".encode() + payload
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


@dataclass
class Delivery:
    event_id: str
    event_type: str
    attempt: int
    at: float
    status: int | None  # the endpoint's answer; None: no answer, or not sent
    outcome: str  # delivered | failed | dropped
    fault: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event_id,
            "type": self.event_type,
            "attempt": self.attempt,
            "at": self.at,
            "status": self.status,
            "outcome": self.outcome,
            "fault": self.fault,
            "error": self.error,
        }


@dataclass
class WebhookSender:
    faults: FaultBook
    url: str | None = None
    secret: str | None = None
    retry_seconds: float = 0.5
    max_attempts: int = 5
    # How long a reordered event waits for a successor before it is delivered anyway.
    reorder_hold_seconds: float = 2.0
    _queue: queue.Queue[StoredEvent | None] = field(default_factory=queue.Queue)
    # A ring like the request log: a long-running simulator must not grow without bound.
    _deliveries: deque[Delivery] = field(default_factory=lambda: deque(maxlen=100_000))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _timers: list[threading.Timer] = field(default_factory=list)
    _generation: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.secret)

    def configure(
        self, url: str | None, secret: str | None, *, reorder_hold_seconds: float | None = None
    ) -> None:
        with self._lock:
            self.url, self.secret = url, secret
            if reorder_hold_seconds is not None:
                self.reorder_hold_seconds = reorder_hold_seconds

    def enqueue(self, event: StoredEvent) -> None:
        """Queue one event (called under the simulator's lock: never blocks)."""
        if not self.enabled or self._stopping.is_set():
            return
        self._ensure_thread()
        self._queue.put(event)

    def deliveries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d.to_json() for d in self._deliveries]

    def forget(self) -> None:
        """Drop queued and scheduled deliveries and the log (``/_sim/reset``)."""
        with self._lock:
            self._generation += 1
            self._deliveries.clear()
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def stop(self) -> None:
        self._stopping.set()
        self.forget()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=_DELIVERY_TIMEOUT_SECONDS + 1)

    # -- the sender thread ---------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="sim-webhooks", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        held: StoredEvent | None = None
        with httpx.Client(timeout=_DELIVERY_TIMEOUT_SECONDS, trust_env=False) as http:
            while not self._stopping.is_set():
                try:
                    event = self._queue.get(timeout=self.reorder_hold_seconds if held else None)
                except queue.Empty:
                    assert held is not None
                    self._send(http, held, attempt=1, fault="reorder")
                    held = None
                    continue
                if event is None:
                    return
                fault = self.faults.pick("webhook", event.amount)
                mode = fault.mode if fault is not None else None
                if mode == "drop":
                    self._log(
                        Delivery(
                            event.body["id"],
                            event.body["type"],
                            1,
                            time.time(),
                            None,
                            "dropped",
                            fault="drop",
                        )
                    )
                elif mode == "reorder" and held is None:
                    held = event
                    continue
                elif mode == "delay":
                    seconds = fault.seconds if fault is not None and fault.seconds else 1.0
                    self._later(seconds, event, attempt=1, fault="delay")
                else:
                    self._send(http, event, attempt=1, fault=mode)
                    if mode == "duplicate":
                        self._send(http, event, attempt=1, fault="duplicate")
                if held is not None:
                    self._send(http, held, attempt=1, fault="reorder")
                    held = None

    def _later(
        self, seconds: float, event: StoredEvent, *, attempt: int, fault: str | None
    ) -> None:
        generation = self._generation

        def fire() -> None:
            if self._stopping.is_set() or generation != self._generation:
                return
            with httpx.Client(timeout=_DELIVERY_TIMEOUT_SECONDS, trust_env=False) as http:
                self._send(http, event, attempt=attempt, fault=fault)

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        with self._lock:
            # Kept only to cancel them on reset; finished ones are dropped here.
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    def _send(
        self, http: httpx.Client, event: StoredEvent, *, attempt: int, fault: str | None
    ) -> None:
        with self._lock:
            url, secret = self.url, self.secret
        if not url or not secret:
            return
        payload = json.dumps(event.body, indent=2).encode()
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "Stripe-Signature": signature_header(payload, secret, int(time.time())),
            "User-Agent": _USER_AGENT,
        }
        status: int | None = None
        error: str | None = None
        try:
            status = http.post(url, content=payload, headers=headers).status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        delivered = status is not None and 200 <= status < 300
        self._log(
            Delivery(
                event.body["id"],
                event.body["type"],
                attempt,
                time.time(),
                status,
                "delivered" if delivered else "failed",
                fault=fault,
                error=error,
            )
        )
        if not delivered and attempt < self.max_attempts:
            self._later(self.retry_seconds, event, attempt=attempt + 1, fault=None)

    def _log(self, delivery: Delivery) -> None:
        with self._lock:
            self._deliveries.append(delivery)
