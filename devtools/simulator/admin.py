"""The admin API under ``/_sim`` (not Stripe's; no authentication, local use only).

GET    /_sim/health          {"ok": true}
GET    /_sim/movements       money that moved (see ``Simulator.movements``):
                             {"total", "amount": {currency: minor units},
                              "by_intent": {pi: n}, "by_record": {record id: n},
                              "charges": [...], "declines": {"total", "by_intent",
                              "by_record", "items": [...]}}
GET    /_sim/requests        {"data": [request, ...]} in arrival order; filters
                             ?intent_id=pi_…  ?record_id=…
GET    /_sim/faults          {"seed": n, "rules": [rule, ...]}
POST   /_sim/faults          body: a rule ({"spec": "confirm:hang:times=1"} or the
                             fields of FaultRule.to_json) or a list of them;
                             answers 201 {"rules": [armed rule, ...]}
DELETE /_sim/faults          remove every rule
DELETE /_sim/faults/{id}     remove one rule (404 if unknown)
POST   /_sim/reset           forget everything; start-up faults are armed again
POST   /_sim/refunds/{id}/settle   move a pending or failing refund on now; body
                             {"status": "succeeded"|"failed"|"canceled"} or {} (the card's
                             behaviour); answers the refund
POST   /_sim/dashboard/refunds     a refund made outside the API (Stripe's Dashboard): body
                             {"payment_intent", "amount"?, "reason"?}; answers Stripe's
                             refund, or Stripe's error with its status
POST   /_sim/dashboard/disputes    the customer disputes the charge: body
                             {"payment_intent", "amount"?, "reason"?}; answers the dispute
POST   /_sim/payment_intents/{id}/authenticate   the customer completes 3-D Secure: body
                             {"outcome": "succeed"|"fail"} (default succeed); answers the intent
POST   /_sim/payment_intents/{id}/settle   a processing intent settles: body
                             {"outcome": "succeeded"|"failed"} or {} (its payment method's)
POST   /_sim/payment_intents/{id}/expire_authorization   Stripe's 7-day expiry of an
                             uncaptured authorisation: canceled, cancellation_reason automatic
POST   /_sim/balance_transactions/adjust   the balance transaction of a charge or refund
                             now says another amount: body {"source": "ch_…"|"re_…",
                             "amount"}; answers it
GET    /_sim/webhooks        {"url", "enabled", "deliveries": [delivery, ...]} in order
POST   /_sim/webhooks        body {"url", "secret", "reorder_hold_seconds"?} (null url and
                             secret: stop delivering)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from devtools.simulator.core import Simulator
from devtools.simulator.faults import FaultRule


def routes(simulator: Simulator) -> list[Route]:
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def movements(request: Request) -> Response:
        return JSONResponse(simulator.movements())

    async def requests(request: Request) -> Response:
        data = simulator.requests(
            intent_id=request.query_params.get("intent_id"),
            record_id=request.query_params.get("record_id"),
        )
        return JSONResponse({"data": data})

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
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)
        armed = [simulator.faults.add(rule).to_json() for rule in rules]
        return JSONResponse({"rules": armed}, status_code=201)

    async def clear_faults(request: Request) -> Response:
        simulator.faults.clear()
        return JSONResponse({"rules": []})

    async def remove_fault(request: Request) -> Response:
        if not simulator.faults.remove(request.path_params["rule_id"]):
            return JSONResponse({"error": {"message": "no such fault rule"}}, status_code=404)
        return JSONResponse({"rules": simulator.faults.rules()})

    async def reset(request: Request) -> Response:
        simulator.reset()
        return JSONResponse({"ok": True})

    async def settle_refund(request: Request) -> Response:
        try:
            payload = await _json_object(request)
            status = payload.get("status")
            refund = simulator.settle_refund(
                request.path_params["refund"], str(status) if status is not None else None
            )
        except KeyError:
            return JSONResponse({"error": {"message": "no such refund"}}, status_code=404)
        except ValueError as exc:
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)
        return JSONResponse(refund)

    async def dashboard_refund(request: Request) -> Response:
        try:
            payload = await _json_object(request)
            intent = payload["payment_intent"]
            amount = payload.get("amount")
            if not isinstance(intent, str) or not (amount is None or isinstance(amount, int)):
                raise ValueError("payment_intent is a string and amount an integer")
        except (KeyError, ValueError) as exc:
            return JSONResponse({"error": {"message": f"bad request: {exc}"}}, status_code=400)
        reason = payload.get("reason")
        status, body = simulator.dashboard_refund(
            intent, amount, str(reason) if reason is not None else None
        )
        return JSONResponse(body, status_code=status)

    async def authenticate(request: Request) -> Response:
        payload = await _json_object(request)
        outcome = payload.get("outcome", "succeed")
        if outcome not in ("succeed", "fail"):
            return _problem(400, 'outcome is "succeed" or "fail"')
        return _acted(
            lambda: simulator.authenticate(
                request.path_params["intent"], succeed=outcome == "succeed"
            )
        )

    async def settle_intent(request: Request) -> Response:
        payload = await _json_object(request)
        outcome = payload.get("outcome")
        return _acted(
            lambda: simulator.settle_intent(
                request.path_params["intent"], str(outcome) if outcome is not None else None
            )
        )

    async def expire_authorization(request: Request) -> Response:
        return _acted(lambda: simulator.expire_authorization(request.path_params["intent"]))

    async def dispute(request: Request) -> Response:
        try:
            payload = await _json_object(request)
            intent = payload["payment_intent"]
            amount = payload.get("amount")
            if not isinstance(intent, str) or not (amount is None or isinstance(amount, int)):
                raise ValueError("payment_intent is a string and amount an integer")
        except (KeyError, ValueError) as exc:
            return _problem(400, f"bad request: {exc}")
        reason = str(payload.get("reason") or "fraudulent")
        return _acted(lambda: simulator.open_dispute(intent, amount, reason))

    async def adjust_balance(request: Request) -> Response:
        payload = await _json_object(request)
        source, amount = payload.get("source"), payload.get("amount")
        if not isinstance(source, str) or not isinstance(amount, int):
            return _problem(400, "source is a string and amount an integer")
        return _acted(lambda: simulator.adjust_balance(source, amount))

    async def webhooks(request: Request) -> Response:
        sender = simulator.webhooks
        return JSONResponse(
            {"url": sender.url, "enabled": sender.enabled, "deliveries": sender.deliveries()}
        )

    async def configure_webhooks(request: Request) -> Response:
        payload = await _json_object(request)
        url, secret = payload.get("url"), payload.get("secret")
        if url is not None and not isinstance(url, str):
            return _problem(400, "url is a string or null")
        if secret is not None and not (isinstance(secret, str) and secret.startswith("whsec_")):
            return _problem(400, "secret is a whsec_… string or null")
        hold = payload.get("reorder_hold_seconds")
        if hold is not None and not (isinstance(hold, int | float) and hold >= 0):
            return _problem(400, "reorder_hold_seconds is a number >= 0")
        simulator.webhooks.configure(
            url, secret, reorder_hold_seconds=float(hold) if hold is not None else None
        )
        return JSONResponse({"url": url, "enabled": simulator.webhooks.enabled})

    return [
        Route("/_sim/health", health, methods=["GET"]),
        Route("/_sim/movements", movements, methods=["GET"]),
        Route("/_sim/requests", requests, methods=["GET"]),
        Route("/_sim/faults", list_faults, methods=["GET"]),
        Route("/_sim/faults", add_faults, methods=["POST"]),
        Route("/_sim/faults", clear_faults, methods=["DELETE"]),
        Route("/_sim/faults/{rule_id:int}", remove_fault, methods=["DELETE"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/refunds/{refund}/settle", settle_refund, methods=["POST"]),
        Route("/_sim/dashboard/refunds", dashboard_refund, methods=["POST"]),
        Route("/_sim/dashboard/disputes", dispute, methods=["POST"]),
        Route("/_sim/payment_intents/{intent}/authenticate", authenticate, methods=["POST"]),
        Route("/_sim/payment_intents/{intent}/settle", settle_intent, methods=["POST"]),
        Route(
            "/_sim/payment_intents/{intent}/expire_authorization",
            expire_authorization,
            methods=["POST"],
        ),
        Route("/_sim/balance_transactions/adjust", adjust_balance, methods=["POST"]),
        Route("/_sim/webhooks", webhooks, methods=["GET"]),
        Route("/_sim/webhooks", configure_webhooks, methods=["POST"]),
    ]


def _problem(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _acted(action: Callable[[], dict[str, Any]]) -> Response:
    """Run a test-only action: 404 for an unknown object, 409 for one in the wrong state."""
    try:
        return JSONResponse(action())
    except KeyError as exc:
        return _problem(404, f"no such object: {exc}")
    except ValueError as exc:
        return _problem(409, str(exc))


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    payload: Any = json.loads(raw) if raw.strip() else {}
    if not isinstance(payload, dict):
        raise ValueError("the body is a JSON object")
    return payload
