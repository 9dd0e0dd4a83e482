"""Notification delivery: each NotificationRequestItem POSTed to the configured URL as
Adyen sends it (``{"live": "false", "notificationItems": [{"NotificationRequestItem":
{...}}]}``, one item per request), signed in ``additionalData.hmacSignature`` with
``orchestrator.providers.adyen_hmac`` (Adyen's scheme), with delivery faults.

    item ─> queue ─> sender thread ─> pick a webhook fault (FaultBook, operation "webhook")
      drop        never delivered (logged as dropped)
      duplicate   delivered twice (the same item, the same signature)
      reorder     held back and delivered after the next item (or after
                  ``reorder_hold_seconds`` if none follows)
      delay       delivered ``seconds`` later (others overtake it)
    POST ─> 2xx: delivered (Adyen takes any 2xx since 2024; ``[accepted]`` still fine);
            anything else or no answer: retried after ``retry_seconds``, up to
            ``max_attempts`` in all (Adyen retries for 30 days; tests need seconds)

Each retry is scheduled on its own: unlike Adyen, later items do not wait behind a failing
one (so a failing endpoint also sees items out of order, which it must survive anyway).
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx

from devtools.adyen_simulator.faults import FaultBook
from orchestrator.providers.adyen_hmac import signed_item

# One delivery attempt's timeout: Adyen waits 10 seconds for the acknowledgement.
_DELIVERY_TIMEOUT_SECONDS = 10.0
_USER_AGENT = "Adyen HttpClient 1.0"


def envelope(item: dict[str, Any]) -> dict[str, Any]:
    """The body Adyen POSTs for one item."""
    return {"live": "false", "notificationItems": [{"NotificationRequestItem": item}]}


@dataclass
class Delivery:
    seq: int
    item: dict[str, Any]
    attempt: int
    at: float
    status: int | None  # the endpoint's answer; None: no answer, or not sent
    outcome: str  # delivered | failed | dropped
    fault: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "eventCode": self.item.get("eventCode"),
            "pspReference": self.item.get("pspReference"),
            "success": self.item.get("success"),
            "attempt": self.attempt,
            "at": self.at,
            "status": self.status,
            "outcome": self.outcome,
            "fault": self.fault,
            "error": self.error,
            "item": self.item,
        }


@dataclass
class _Queued:
    seq: int
    item: dict[str, Any]  # unsigned: signed at each send with the key then in force
    generation: int  # items made before a reset are never sent after it


@dataclass
class NotificationSender:
    faults: FaultBook
    url: str | None = None
    hmac_key: str | None = None
    basic_auth: str | None = None
    retry_seconds: float = 0.5
    max_attempts: int = 5
    reorder_hold_seconds: float = 2.0
    _queue: queue.Queue[_Queued | None] = field(default_factory=queue.Queue)
    # Every item made, in order (whether or not it was delivered): ``GET /_sim/notifications``.
    _items: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=100_000))
    _deliveries: deque[Delivery] = field(default_factory=lambda: deque(maxlen=100_000))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _timers: list[threading.Timer] = field(default_factory=list)
    _generation: int = 0
    _seq: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.hmac_key)

    def configure(
        self,
        url: str | None,
        hmac_key: str | None,
        *,
        basic_auth: str | None = None,
        reorder_hold_seconds: float | None = None,
    ) -> None:
        with self._lock:
            self.url, self.hmac_key, self.basic_auth = url, hmac_key, basic_auth
            if reorder_hold_seconds is not None:
                self.reorder_hold_seconds = reorder_hold_seconds

    def enqueue(self, item: dict[str, Any], *, delay_seconds: float = 0.0) -> None:
        """Record one item and queue it for delivery (never blocks)."""
        with self._lock:
            self._seq += 1
            queued = _Queued(self._seq, item, self._generation)
            self._items.append(item)
        if not self.enabled or self._stopping.is_set():
            return
        if delay_seconds > 0:
            self._later(delay_seconds, lambda: self._queue.put(queued))
            self._ensure_thread()
            return
        self._ensure_thread()
        self._queue.put(queued)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def deliveries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d.to_json() for d in self._deliveries]

    def forget(self) -> None:
        """Drop queued and scheduled deliveries and the logs (``/_sim/reset``)."""
        with self._lock:
            self._generation += 1
            self._items.clear()
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
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="adyen-sim-notifications", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        held: _Queued | None = None
        with httpx.Client(timeout=_DELIVERY_TIMEOUT_SECONDS, trust_env=False) as http:
            while not self._stopping.is_set():
                try:
                    queued = self._queue.get(timeout=self.reorder_hold_seconds if held else None)
                except queue.Empty:
                    assert held is not None
                    self._send(http, held, attempt=1, fault="reorder")
                    held = None
                    continue
                if queued is None:
                    return
                if queued.generation != self._generation:
                    continue
                value = queued.item.get("amount", {}).get("value")
                fault = self.faults.pick("webhook", value if isinstance(value, int) else None)
                mode = fault.mode if fault is not None else None
                if mode == "drop":
                    self._log(
                        Delivery(
                            queued.seq, queued.item, 1, time.time(), None, "dropped", fault="drop"
                        )
                    )
                elif mode == "reorder" and held is None:
                    held = queued
                    continue
                elif mode == "delay":
                    seconds = fault.seconds if fault is not None and fault.seconds else 1.0
                    self._send_later(seconds, queued, attempt=1, fault="delay")
                else:
                    self._send(http, queued, attempt=1, fault=mode)
                    if mode == "duplicate":
                        self._send(http, queued, attempt=1, fault="duplicate")
                if held is not None:
                    self._send(http, held, attempt=1, fault="reorder")
                    held = None

    def _later(self, seconds: float, action: Any) -> None:
        generation = self._generation

        def fire() -> None:
            if self._stopping.is_set() or generation != self._generation:
                return
            action()

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        with self._lock:
            self._timers = [t for t in self._timers if t.is_alive()]
            self._timers.append(timer)
        timer.start()

    def _send_later(
        self, seconds: float, queued: _Queued, *, attempt: int, fault: str | None
    ) -> None:
        def send() -> None:
            with httpx.Client(timeout=_DELIVERY_TIMEOUT_SECONDS, trust_env=False) as http:
                self._send(http, queued, attempt=attempt, fault=fault)

        self._later(seconds, send)

    def _send(
        self, http: httpx.Client, queued: _Queued, *, attempt: int, fault: str | None
    ) -> None:
        with self._lock:
            url, key, basic = self.url, self.hmac_key, self.basic_auth
            current = queued.generation == self._generation
        if not url or not key or not current:
            return
        item = signed_item(queued.item, key)
        payload = json.dumps(envelope(item)).encode()
        headers = {"Content-Type": "application/json", "User-Agent": _USER_AGENT}
        if basic:
            headers["Authorization"] = "Basic " + base64.b64encode(basic.encode()).decode()
        status: int | None = None
        error: str | None = None
        try:
            status = http.post(url, content=payload, headers=headers).status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        delivered = status is not None and 200 <= status < 300
        self._log(
            Delivery(
                queued.seq,
                item,
                attempt,
                time.time(),
                status,
                "delivered" if delivered else "failed",
                fault=fault,
                error=error,
            )
        )
        if not delivered and attempt < self.max_attempts:
            self._send_later(self.retry_seconds, queued, attempt=attempt + 1, fault=None)

    def _log(self, delivery: Delivery) -> None:
        with self._lock:
            self._deliveries.append(delivery)
