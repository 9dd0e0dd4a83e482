"""A small client for the Adyen simulator's admin API (``/_sim``), for tests and the demo.
It never calls the Checkout API: that is the adapter's (or a test's) job."""

from __future__ import annotations

from types import TracebackType
from typing import Any, cast

import httpx

from devtools.adyen_simulator.faults import FaultRule, parse_fault_spec

_ADMIN_TIMEOUT_SECONDS = 10.0


class AdyenSimulatorAdmin:
    def __init__(self, base_url: str, *, transport: httpx.BaseTransport | None = None) -> None:
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

    def payments(self, *, reference: str | None = None) -> list[dict[str, Any]]:
        params = {"reference": reference} if reference is not None else {}
        return cast(
            list[dict[str, Any]], self._json("GET", "/_sim/payments", params=params)["data"]
        )

    def requests(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._json("GET", "/_sim/requests")["data"])

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

    def close_batch(self) -> dict[str, Any]:
        """Close the open settlement batch: {"batch": n, "rows": k}."""
        return self._json("POST", "/_sim/settlement/close")

    def settle(self, psp_reference: str, *, authorised: bool = True) -> dict[str, Any]:
        """A Pending payment (holderName PENDING) settles; returns its final answer."""
        outcome = "authorised" if authorised else "refused"
        return self._json(
            "POST", f"/_sim/payments/{psp_reference}/settle", json={"outcome": outcome}
        )

    def chargeback(
        self, psp_reference: str, *, amount: int | None = None, reason_code: str = "10.4"
    ) -> dict[str, Any]:
        """The shopper disputes the payment: a CHARGEBACK notification follows."""
        body: dict[str, Any] = {"reason_code": reason_code}
        if amount is not None:
            body["amount"] = amount
        return self._json("POST", f"/_sim/payments/{psp_reference}/chargeback", json=body)

    def expire(self, psp_reference: str) -> dict[str, Any]:
        """The uncaptured authorisation expires: an EXPIRE notification follows."""
        return self._json("POST", f"/_sim/payments/{psp_reference}/expire")

    def fail_later(self, psp_reference: str, modification: str) -> dict[str, Any]:
        """The payment's later captures (or refunds) fail at the scheme: CAPTURE_FAILED
        (REFUND_FAILED) follows each successful CAPTURE (REFUND)."""
        return self._json(
            "POST",
            f"/_sim/payments/{psp_reference}/fail_later",
            json={"modification": modification},
        )

    def configure_notifications(
        self,
        url: str | None,
        hmac_key: str | None,
        *,
        basic_auth: str | None = None,
        reorder_hold_seconds: float | None = None,
    ) -> None:
        """Deliver every notification to ``url``, signed with ``hmac_key`` (hex; None, None:
        stop delivering)."""
        body: dict[str, Any] = {"url": url, "hmac_key": hmac_key, "basic_auth": basic_auth}
        if reorder_hold_seconds is not None:
            body["reorder_hold_seconds"] = reorder_hold_seconds
        self._json("POST", "/_sim/notifications", json=body)

    def notification_items(self) -> list[dict[str, Any]]:
        """Every NotificationRequestItem made, in order, unsigned (delivered or not)."""
        return cast(list[dict[str, Any]], self._json("GET", "/_sim/notifications")["items"])

    def notification_deliveries(self) -> list[dict[str, Any]]:
        """Each delivery attempt, with the signed item, status, outcome and fault."""
        return cast(list[dict[str, Any]], self._json("GET", "/_sim/notifications")["deliveries"])

    def three_ds_result(
        self, authorisation_token: str | None = None, *, succeed: bool = True
    ) -> str:
        params = {"outcome": "succeed" if succeed else "fail"}
        if authorisation_token is not None:
            params["token"] = authorisation_token
        return str(self._json("GET", "/_sim/three_ds_result", params=params)["threeDSResult"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdyenSimulatorAdmin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
