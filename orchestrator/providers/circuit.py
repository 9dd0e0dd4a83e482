"""What the observing wrapper (``observed``) asks of a connector account's circuit.

Every provider call goes through ``ObservedProvider._observe``; with a ``CallGate`` it asks
the account's circuit first (``admit``) and reports how the call went (``settle``).  The
circuit itself (state in the database, a short in-process cache) is ``engine.circuits``;
this module is only the seam and the classification, so no adapter knows of it.

``CircuitOpen`` is deliberately not a ``ProviderError``: no call was made, so nothing the
provider said is in it, and no operation kind's ``except`` clause takes it for an answer.
It reaches the runner, which makes the record wait (no attempt spent, never parked).
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.providers.base import Declined, OutcomeUnknown, Permanent, ProviderError


class CircuitOpen(Exception):
    """The call was not made: the connector account's circuit is open (the provider is
    failing).  A provider-side unavailability: the record waits, or, under the failover
    rule, another account may be tried."""

    def __init__(self, key: str, *, retry_after: float) -> None:
        super().__init__(f"circuit open for {key}: provider unavailable")
        self.key = key
        # Seconds until the circuit lets a probe through.
        self.retry_after = retry_after


class CallGate(Protocol):
    def admit(self) -> bool:
        """Before a call: True if it goes as a half-open probe, False as an ordinary call;
        raises ``CircuitOpen`` when it may not go at all."""
        ...

    def settle(self, *, failed: bool, probe: bool) -> None:
        """After a call: whether the provider failed it (``counts_against_circuit``)."""
        ...


def counts_against_circuit(error: BaseException | None) -> bool:
    """Whether a call's end says the provider is unwell: an unknown outcome (timeout,
    connection error, a 5xx the adapter could not resolve) or any other 5xx.  A decline, a
    4xx (our request) and a 429 (the provider answering, busy: the worker backs off) are
    the provider working, as is any answer."""
    if error is None or isinstance(error, Declined | Permanent):
        return False
    if isinstance(error, OutcomeUnknown):
        return True
    if isinstance(error, ProviderError):
        return error.http_status is not None and error.http_status >= 500
    # Not a provider error (a bug, an interruption): says nothing about the provider.
    return False
