"""The demo's 3-D Secure customer: completes the challenge the moment the provider asks.

A payment the demo means its customer to authenticate carries
``metadata.demo_customer = "authenticate"`` (``storm.LogicalPayment.body``); payorch passes
the merchant's metadata on to the intent.  The customer watches the in-process simulator's
events; when such an intent reaches ``requires_action`` it completes the challenge from a
thread of its own, as a shopper's browser sent to the bank would.  A payment without the
mark is abandoned and ends ``canceled`` / ``authentication_timeout``.

Hazard this replaces: the customer used to act when its poll of payorch showed
``requires_action``.  The action timeout runs from the challenge, and on a loaded machine
the poll's backoff (and the one process's shared interpreter) outlasted it, so the demo
failed on timing with no money wrong.  Watching the provider makes the customer's moment
independent of the machine's speed.
"""

from __future__ import annotations

import queue
import threading

from devtools.simulator.core import Simulator
from devtools.simulator.events import StoredEvent

METADATA_KEY = "demo_customer"
AUTHENTICATE = "authenticate"
CHALLENGE_EVENT = "payment_intent.requires_action"


class Customer:
    """Authenticates every marked intent once it asks; ``authenticated`` counts them."""

    def __init__(self, simulator: Simulator) -> None:
        self._simulator = simulator
        self._challenges: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="demo-customer", daemon=True)
        self.authenticated = 0

    def __enter__(self) -> Customer:
        self._simulator.state.events.watchers.append(self._watch)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._simulator.state.events.watchers.remove(self._watch)
        self._challenges.put(None)
        self._thread.join(5)

    def _watch(self, event: StoredEvent) -> None:
        """Called under the simulator's lock: only hands the intent on."""
        body = event.body
        if body["type"] != CHALLENGE_EVENT:
            return
        intent = body["data"]["object"]
        if (intent.get("metadata") or {}).get(METADATA_KEY) == AUTHENTICATE:
            self._challenges.put(intent["id"])

    def _run(self) -> None:
        while (intent_id := self._challenges.get()) is not None:
            try:
                # Waits for the simulator's lock: the confirm that asked has answered first.
                self._simulator.authenticate(intent_id, succeed=True)
            except (KeyError, ValueError):
                continue  # no longer waiting (canceled, or authenticated already)
            self.authenticated += 1
