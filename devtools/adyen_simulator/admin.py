"""The admin API under ``/_sim`` (not Adyen's; no authentication, local use only).

GET    /_sim/health          {"ok": true}
GET    /_sim/movements       money that moved: {"authorisations" | "captures" | "refunds" |
                             "cancels" | "refusals": {"total", "amount": {currency: minor},
                             "by_reference", "by_payment", "items": [...]}} (late failures
                             are in items, marked failed, and not counted)
GET    /_sim/payments        {"data": [payment, ...]}; ?reference=… filters
GET    /_sim/requests        {"data": [request, ...]} in arrival order
GET    /_sim/faults          {"seed": n, "rules": [rule, ...]}
POST   /_sim/faults          a rule ({"spec": "payments:timeout_after_effect:times=1"} or the
                             fields of FaultRule.to_json) or a list; 201 {"rules": [...]}
DELETE /_sim/faults          remove every rule
DELETE /_sim/faults/{id}     remove one rule (404 if unknown)
POST   /_sim/reset           forget everything; start-up faults are armed again
POST   /_sim/payments/{psp}/settle   a Pending payment settles: {"outcome":
                             "authorised"|"refused"} (default authorised)
POST   /_sim/payments/{psp}/chargeback  the shopper disputes: {"amount"?: minor units (default
                             all captured and not refunded), "reason_code"?: "10.4"}; a
                             CHARGEBACK notification
POST   /_sim/payments/{psp}/expire  an uncaptured authorisation (or its remainder) expires;
                             an EXPIRE notification
POST   /_sim/payments/{psp}/fail_later  {"modification": "capture"|"refund"}: its later
                             captures (refunds) fail at the scheme, CAPTURE_FAILED
                             (REFUND_FAILED) after the CAPTURE (REFUND), as holderName
                             "capture failed" / "refund failed" would (a stored method
                             sends no holderName)
POST   /_sim/settlement/close   the open settlement batch closes (Adyen's payout): {"batch":
                             n, "rows": k}; its report is served from then on (``settlement``)
GET    /_sim/notifications   {"url", "enabled", "items": [item, ...] (every item made, unsigned),
                             "deliveries": [delivery, ...] (each attempt, with the signed item)}
POST   /_sim/notifications   {"url", "hmac_key" (hex), "basic_auth"?, "reorder_hold_seconds"?}
                             (null url and key: stop delivering)
GET    /_sim/three_ds_result ?token=…&outcome=succeed|fail: {"threeDSResult": "…"}, the value
                             a shopper's 3DS2 component would send to /payments/details
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from devtools.adyen_simulator.core import AdyenSimulator
from devtools.adyen_simulator.faults import FaultRule
from devtools.adyen_simulator.state import three_ds_result


def routes(simulator: AdyenSimulator) -> list[Route]:
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def movements(request: Request) -> Response:
        return JSONResponse(simulator.movements())

    async def payments(request: Request) -> Response:
        return JSONResponse({"data": simulator.payments(request.query_params.get("reference"))})

    async def requests(request: Request) -> Response:
        return JSONResponse({"data": simulator.requests()})

    async def list_faults(request: Request) -> Response:
        return JSONResponse({"seed": simulator.faults.seed, "rules": simulator.faults.rules()})

    async def add_faults(request: Request) -> Response:
        try:
            payload: Any = json.loads(await request.body())
            items = payload if isinstance(payload, list) else [payload]
            if not all(isinstance(item, dict) for item in items):
                raise ValueError("a fault rule is a JSON object")
            rules = [FaultRule.from_json(item) for item in items]
        except ValueError as exc:
            return _problem(400, str(exc))
        armed = [simulator.faults.add(rule).to_json() for rule in rules]
        return JSONResponse({"rules": armed}, status_code=201)

    async def clear_faults(request: Request) -> Response:
        simulator.faults.clear()
        return JSONResponse({"rules": []})

    async def remove_fault(request: Request) -> Response:
        if not simulator.faults.remove(request.path_params["rule_id"]):
            return _problem(404, "no such fault rule")
        return JSONResponse({"rules": simulator.faults.rules()})

    async def reset(request: Request) -> Response:
        simulator.reset()
        return JSONResponse({"ok": True})

    async def settle(request: Request) -> Response:
        payload = await _json_object(request)
        outcome = payload.get("outcome", "authorised")
        if outcome not in ("authorised", "refused"):
            return _problem(400, 'outcome is "authorised" or "refused"')
        return _acted(
            lambda: simulator.settle(request.path_params["psp"], authorised=outcome == "authorised")
        )

    async def chargeback(request: Request) -> Response:
        payload = await _json_object(request)
        amount, code = payload.get("amount"), payload.get("reason_code", "10.4")
        if not (amount is None or (isinstance(amount, int) and not isinstance(amount, bool))):
            return _problem(400, "amount is an integer in minor units")
        return _acted(
            lambda: simulator.chargeback(
                request.path_params["psp"], value=amount, reason_code=str(code)
            )
        )

    async def expire(request: Request) -> Response:
        return _acted(lambda: simulator.expire(request.path_params["psp"]))

    async def fail_later(request: Request) -> Response:
        body = await _json_object(request)
        modification = str(body.get("modification", ""))
        return _acted(lambda: simulator.fail_later(request.path_params["psp"], modification))

    async def close_batch(request: Request) -> Response:
        return JSONResponse(simulator.close_batch())

    async def notifications(request: Request) -> Response:
        sender = simulator.notifications
        return JSONResponse(
            {
                "url": sender.url,
                "enabled": sender.enabled,
                "items": sender.items(),
                "deliveries": sender.deliveries(),
            }
        )

    async def configure_notifications(request: Request) -> Response:
        payload = await _json_object(request)
        url, key = payload.get("url"), payload.get("hmac_key")
        basic = payload.get("basic_auth")
        if url is not None and not isinstance(url, str):
            return _problem(400, "url is a string or null")
        if key is not None:
            try:
                binascii.unhexlify(str(key))
            except (binascii.Error, ValueError):
                return _problem(400, "hmac_key is a hex string or null")
        if basic is not None and not (isinstance(basic, str) and ":" in basic):
            return _problem(400, 'basic_auth is "user:password" or null')
        hold = payload.get("reorder_hold_seconds")
        if hold is not None and not (isinstance(hold, int | float) and hold >= 0):
            return _problem(400, "reorder_hold_seconds is a number >= 0")
        simulator.notifications.configure(
            url,
            str(key) if key is not None else None,
            basic_auth=basic,
            reorder_hold_seconds=float(hold) if hold is not None else None,
        )
        return JSONResponse({"url": url, "enabled": simulator.notifications.enabled})

    async def make_three_ds_result(request: Request) -> Response:
        outcome = request.query_params.get("outcome", "succeed")
        if outcome not in ("succeed", "fail"):
            return _problem(400, 'outcome is "succeed" or "fail"')
        token = request.query_params.get("token")
        return JSONResponse({"threeDSResult": three_ds_result(token, succeed=outcome == "succeed")})

    return [
        Route("/_sim/health", health, methods=["GET"]),
        Route("/_sim/movements", movements, methods=["GET"]),
        Route("/_sim/payments", payments, methods=["GET"]),
        Route("/_sim/requests", requests, methods=["GET"]),
        Route("/_sim/faults", list_faults, methods=["GET"]),
        Route("/_sim/faults", add_faults, methods=["POST"]),
        Route("/_sim/faults", clear_faults, methods=["DELETE"]),
        Route("/_sim/faults/{rule_id:int}", remove_fault, methods=["DELETE"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/payments/{psp}/settle", settle, methods=["POST"]),
        Route("/_sim/payments/{psp}/chargeback", chargeback, methods=["POST"]),
        Route("/_sim/payments/{psp}/expire", expire, methods=["POST"]),
        Route("/_sim/payments/{psp}/fail_later", fail_later, methods=["POST"]),
        Route("/_sim/settlement/close", close_batch, methods=["POST"]),
        Route("/_sim/notifications", notifications, methods=["GET"]),
        Route("/_sim/notifications", configure_notifications, methods=["POST"]),
        Route("/_sim/three_ds_result", make_three_ds_result, methods=["GET"]),
    ]


def _problem(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _acted(action: Callable[[], dict[str, Any]]) -> Response:
    """Run a test-only action: 404 for an unknown payment, 409 for one in the wrong state."""
    try:
        return JSONResponse(action())
    except KeyError as exc:
        return _problem(404, f"no such payment: {exc}")
    except ValueError as exc:
        return _problem(409, str(exc))


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    payload: Any = json.loads(raw) if raw.strip() else {}
    if not isinstance(payload, dict):
        raise ValueError("the body is a JSON object")
    return payload
