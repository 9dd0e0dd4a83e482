"""A small client for the simulator's admin API (``/_sim``), for tests, the demo and the
benchmark.  It never talks to ``/v1``: that is the Stripe SDK's job."""

from __future__ import annotations

from types import TracebackType
from typing import Any, cast

import httpx

from devtools.simulator.faults import FaultRule, parse_fault_spec

# Admin calls are local and quick; a generous bound still fails a test fast if the
# simulator wedged instead of hanging it.
_ADMIN_TIMEOUT_SECONDS = 10.0


class SimulatorAdmin:
    def __init__(self, base_url: str, *, transport: httpx.BaseTransport | None = None) -> None:
        # trust_env=False: a proxy from the environment must not intercept a local admin call.
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=_ADMIN_TIMEOUT_SECONDS,
            transport=transport,
            trust_env=False,
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._http.request(method, path, **kwargs)
        response.raise_for_status()
        return cast(dict[str, Any], response.json())

    def health(self) -> bool:
        return bool(self._json("GET", "/_sim/health").get("ok"))

    def movements(self) -> dict[str, Any]:
        return self._json("GET", "/_sim/movements")

    def requests(
        self, *, intent_id: str | None = None, record_id: str | None = None
    ) -> list[dict[str, Any]]:
        params = {
            k: v for k, v in (("intent_id", intent_id), ("record_id", record_id)) if v is not None
        }
        return cast(
            list[dict[str, Any]], self._json("GET", "/_sim/requests", params=params)["data"]
        )

    def faults(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._json("GET", "/_sim/faults")["rules"])

    def add_fault(self, rule: FaultRule | str) -> dict[str, Any]:
        """Arm one rule (a ``FaultRule`` or its text spec); returns it with its id."""
        parsed = parse_fault_spec(rule) if isinstance(rule, str) else rule
        armed = self._json("POST", "/_sim/faults", json=parsed.to_json())["rules"]
        return cast(dict[str, Any], armed[0])

    def remove_fault(self, rule_id: int) -> None:
        self._json("DELETE", f"/_sim/faults/{rule_id}")

    def clear_faults(self) -> None:
        self._json("DELETE", "/_sim/faults")

    def reset(self) -> None:
        self._json("POST", "/_sim/reset")

    def settle_refund(self, refund_id: str, status: str | None = None) -> dict[str, Any]:
        """Move a pending or failing refund on now; returns Stripe's refund object."""
        body = {} if status is None else {"status": status}
        return self._json("POST", f"/_sim/refunds/{refund_id}/settle", json=body)

    def dashboard_refund(
        self, intent_id: str, *, amount: int | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Refund outside payorch (Stripe's Dashboard); raises on Stripe's error."""
        body: dict[str, Any] = {"payment_intent": intent_id}
        if amount is not None:
            body["amount"] = amount
        if reason is not None:
            body["reason"] = reason
        return self._json("POST", "/_sim/dashboard/refunds", json=body)

    def authenticate(self, intent_id: str, *, succeed: bool = True) -> dict[str, Any]:
        """The customer completes (or fails) 3-D Secure for ``intent_id``."""
        body = {"outcome": "succeed" if succeed else "fail"}
        return self._json("POST", f"/_sim/payment_intents/{intent_id}/authenticate", json=body)

    def settle_intent(self, intent_id: str, outcome: str | None = None) -> dict[str, Any]:
        """A processing intent settles (``succeeded`` / ``failed``; default: its method's)."""
        body = {} if outcome is None else {"outcome": outcome}
        return self._json("POST", f"/_sim/payment_intents/{intent_id}/settle", json=body)

    def expire_authorization(self, intent_id: str) -> dict[str, Any]:
        """Stripe's 7-day expiry of an uncaptured authorisation, now."""
        return self._json("POST", f"/_sim/payment_intents/{intent_id}/expire_authorization")

    def open_dispute(
        self, intent_id: str, *, amount: int | None = None, reason: str = "fraudulent"
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"payment_intent": intent_id, "reason": reason}
        if amount is not None:
            body["amount"] = amount
        return self._json("POST", "/_sim/dashboard/disputes", json=body)

    def adjust_balance(self, source: str, amount: int) -> dict[str, Any]:
        """The balance transaction of a charge or refund (``source``) now says ``amount``."""
        return self._json(
            "POST", "/_sim/balance_transactions/adjust", json={"source": source, "amount": amount}
        )

    def configure_webhooks(
        self, url: str | None, secret: str | None, *, reorder_hold_seconds: float | None = None
    ) -> None:
        """Deliver every event to ``url`` signed with ``secret`` (None, None: stop)."""
        body: dict[str, Any] = {"url": url, "secret": secret}
        if reorder_hold_seconds is not None:
            body["reorder_hold_seconds"] = reorder_hold_seconds
        self._json("POST", "/_sim/webhooks", json=body)

    def webhook_deliveries(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._json("GET", "/_sim/webhooks")["deliveries"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SimulatorAdmin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
