"""Stripe's events: every change the simulated account makes is an ``Event``
(``GET /v1/events``, ``GET /v1/events/{id}``) and, when an endpoint is configured, a webhook
(``webhooks.py``).

    payment_intent.created / .requires_action / .processing / .succeeded / .payment_failed /
    .canceled / .amount_capturable_updated              data.object: the payment intent
    charge.refunded                                     data.object: the charge
    refund.created / refund.updated / refund.failed /
    charge.refund.updated                               data.object: the refund
    charge.dispute.created                              data.object: the dispute

``data.object`` is a snapshot taken when the event was made, as on Stripe: an event says what
happened, the object's current state is what a retrieve answers.  ``request`` names the API
request that caused the event (``{"id": null, "idempotency_key": null}`` for a change the
account made by itself: a settlement, a dashboard refund, a dispute).

Like ``state``, not thread-safe on its own: the caller holds the simulator's lock.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from devtools.simulator import errors, objects
from devtools.simulator import params as params_
from devtools.simulator.models import Outcome

_LIST_PARAMS = frozenset({"created", "ending_before", "limit", "starting_after", "type", "types"})


@dataclass
class RequestContext:
    """The API request being executed, named by the events it causes."""

    id: str | None = None
    idempotency_key: str | None = None


@dataclass
class StoredEvent:
    seq: int
    body: dict[str, Any]
    # The payment intent the event is about, for the admin log and fault matching.
    intent_id: str | None
    amount: int | None


class Sender(Protocol):
    """Where events go besides the log (``webhooks.WebhookSender``)."""

    @property
    def enabled(self) -> bool: ...

    def enqueue(self, event: StoredEvent) -> None: ...


@dataclass
class EventLog:
    api_version: str
    # Gets each new event (under the lock, never blocking) when an endpoint is configured.
    sender: Sender | None = None
    # In-process observers of every new event (the embedded demo's 3-D Secure customer);
    # called under the simulator's lock, so they must only hand the event on, never block.
    watchers: list[Callable[[StoredEvent], None]] = field(default_factory=list)
    # A ring, like the request log: a long-running simulator (the demo, the benchmark) must
    # not grow without bound.  The oldest events are forgotten first (Stripe keeps 30 days).
    max_events: int = 100_000
    request: RequestContext = field(default_factory=RequestContext)
    events: deque[StoredEvent] = field(default_factory=deque)
    _by_id: dict[str, StoredEvent] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def emit(
        self,
        type_: str,
        obj: dict[str, Any],
        *,
        intent_id: str | None,
        amount: int | None = None,
        previous_attributes: dict[str, Any] | None = None,
    ) -> StoredEvent:
        # ``obj`` is freshly rendered by the caller: the snapshot shares nothing with the state.
        data: dict[str, Any] = {"object": obj}
        if previous_attributes is not None:
            data["previous_attributes"] = previous_attributes
        body = objects.render_event(
            event_id=objects.new_id("evt"),
            type_=type_,
            created=int(time.time()),
            data=data,
            api_version=self.api_version,
            request={"id": self.request.id, "idempotency_key": self.request.idempotency_key},
            pending_webhooks=1 if self.sender is not None and self.sender.enabled else 0,
        )
        stored = StoredEvent(seq=next(self._seq), body=body, intent_id=intent_id, amount=amount)
        self.events.append(stored)
        self._by_id[body["id"]] = stored
        while len(self.events) > self.max_events:
            forgotten = self.events.popleft()
            self._by_id.pop(forgotten.body["id"], None)
        if self.sender is not None:
            self.sender.enqueue(stored)
        for watch in self.watchers:
            watch(stored)
        return stored

    # -- reads -------------------------------------------------------------------------

    def retrieve(self, event_id: str, params: dict[str, Any]) -> Outcome:
        params_.reject_unknown(params, frozenset())
        stored = self._by_id.get(event_id)
        if stored is None:
            raise errors.resource_missing("event", event_id, "id", saved=False, status=404)
        return Outcome(200, stored.body, intent_id=stored.intent_id, record_id=None)

    def list_events(self, params: dict[str, Any]) -> Outcome:
        """Newest first, like Stripe; ``type`` (``*`` wildcards: ``payment_intent.*``) or
        ``types[]``, ``created[gt|gte|lt|lte]``, cursors and ``limit``."""
        params_.reject_unknown(params, _LIST_PARAMS)
        limit = params_.limit(params)
        wanted = self._types(params)
        bounds = _created_bounds(params.get("created"))
        candidates = [
            e
            for e in reversed(self.events)
            if (wanted is None or any(_type_matches(e.body["type"], t) for t in wanted))
            and _within(e.body["created"], bounds)
        ]
        starting_after = params_.string(params, "starting_after")
        ending_before = params_.string(params, "ending_before")
        if starting_after is not None:
            anchor = self._anchor(starting_after, "starting_after")
            candidates = [e for e in candidates if e.seq < anchor]
            page = candidates[:limit]
        elif ending_before is not None:
            anchor = self._anchor(ending_before, "ending_before")
            candidates = [e for e in candidates if e.seq > anchor]
            page = candidates[-limit:]
        else:
            page = candidates[:limit]
        return Outcome(
            200,
            objects.render_list(
                "/v1/events", [e.body for e in page], has_more=len(candidates) > len(page)
            ),
            intent_id=None,
            record_id=None,
        )

    @staticmethod
    def _types(params: dict[str, Any]) -> list[str] | None:
        single = params_.string(params, "type")
        several = params.get("types")
        if single is not None and several is not None:
            raise errors.invalid_request(
                "You may only specify one of these parameters: type, types.", param="types"
            )
        if several is not None:
            if not isinstance(several, list) or not all(isinstance(t, str) for t in several):
                raise errors.invalid_request("Invalid array", param="types")
            return [str(t) for t in several]
        return [single] if single is not None else None

    def _anchor(self, event_id: str, param: str) -> int:
        stored = self._by_id.get(event_id)
        if stored is None:
            raise errors.resource_missing("event", event_id, param, saved=False, status=400)
        return stored.seq


def _type_matches(actual: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return actual.startswith(pattern[:-1])
    return actual == pattern


def _created_bounds(created: Any) -> dict[str, int]:
    if created is None:
        return {}
    if isinstance(created, dict):
        bounds: dict[str, int] = {}
        for op, value in created.items():
            if op not in ("gt", "gte", "lt", "lte"):
                raise errors.parameter_unknown(f"created[{op}]")
            parsed = params_.integer({f"created[{op}]": value}, f"created[{op}]")
            assert parsed is not None
            bounds[op] = parsed
        return bounds
    exact = params_.integer({"created": created}, "created")
    assert exact is not None
    return {"gte": exact, "lte": exact}


def _within(created: int, bounds: dict[str, int]) -> bool:
    return (
        ("gt" not in bounds or created > bounds["gt"])
        and ("gte" not in bounds or created >= bounds["gte"])
        and ("lt" not in bounds or created < bounds["lt"])
        and ("lte" not in bounds or created <= bounds["lte"])
    )
