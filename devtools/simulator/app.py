"""The ASGI app: Stripe's PaymentIntents subset under ``/v1``, the admin API under ``/_sim``.

    POST /v1/payment_intents                 create
    POST /v1/payment_intents/{id}/confirm    confirm
    GET  /v1/payment_intents/{id}            retrieve (strongly consistent)
    GET  /v1/payment_intents                 list: created[gt|gte|lt|lte], limit,
                                             starting_after, ending_before (strongly consistent)
    GET  /v1/payment_intents/search          search (eventually consistent: lags by
                                             search_lag_seconds; never decide anything on it)
    POST /v1/payment_intents/{id}/capture    capture (manual capture; amount_to_capture)
    POST /v1/payment_intents/{id}/cancel     cancel (cancellation_reason)
    POST /v1/refunds                         create a refund (payment_intent or charge)
    GET  /v1/refunds/{id}                    retrieve a refund
    GET  /v1/refunds                         list: payment_intent, charge, created[gt|gte|
                                             lt|lte], limit, starting_after, ending_before
                                             (newest first)
    GET  /v1/balance_transactions            list: created[gt|gte|lt|lte], type, limit,
                                             starting_after, ending_before (newest first;
                                             ``balance``)
    GET  /v1/events                          list: type (``*`` wildcard), types[], created,
                                             limit, starting_after, ending_before (newest first)
    GET  /v1/events/{id}                     retrieve an event

Anything else under ``/v1`` answers Stripe's 404 "Unrecognized request URL".
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from devtools.simulator import admin, errors
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.core import Simulator, answer_from_error

_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def create_app(config: SimulatorConfig | None = None) -> Starlette:
    """A fresh simulator as an ASGI app; ``app.state.simulator`` is its ``Simulator``."""
    simulator = Simulator(config or SimulatorConfig())

    async def create(request: Request) -> Response:
        return await simulator.handle(request, "create")

    async def confirm(request: Request) -> Response:
        return await simulator.handle(request, "confirm", request.path_params["intent"])

    async def retrieve(request: Request) -> Response:
        return await simulator.handle(request, "retrieve", request.path_params["intent"])

    async def list_intents(request: Request) -> Response:
        return await simulator.handle(request, "list")

    async def capture(request: Request) -> Response:
        return await simulator.handle(request, "capture", request.path_params["intent"])

    async def cancel(request: Request) -> Response:
        return await simulator.handle(request, "cancel", request.path_params["intent"])

    async def create_refund(request: Request) -> Response:
        return await simulator.handle(request, "refund")

    async def retrieve_refund(request: Request) -> Response:
        return await simulator.handle(request, "retrieve_refund", request.path_params["refund"])

    async def list_refunds(request: Request) -> Response:
        return await simulator.handle(request, "list_refunds")

    async def list_balance_transactions(request: Request) -> Response:
        return await simulator.handle(request, "list_balance_transactions")

    async def list_events(request: Request) -> Response:
        return await simulator.handle(request, "list_events")

    async def retrieve_event(request: Request) -> Response:
        return await simulator.handle(request, "retrieve_event", request.path_params["event"])

    async def search(request: Request) -> Response:
        return await simulator.handle(request, "search")

    async def unrecognized(request: Request) -> Response:
        answer = answer_from_error(errors.unrecognized_url(request.method, request.url.path))
        return Response(answer.body, status_code=answer.status, media_type="application/json")

    routes = [
        Route("/v1/payment_intents", create, methods=["POST"]),
        Route("/v1/payment_intents", list_intents, methods=["GET"]),
        Route("/v1/payment_intents/search", search, methods=["GET"]),
        Route("/v1/payment_intents/{intent}", retrieve, methods=["GET"]),
        Route("/v1/payment_intents/{intent}/confirm", confirm, methods=["POST"]),
        Route("/v1/payment_intents/{intent}/capture", capture, methods=["POST"]),
        Route("/v1/payment_intents/{intent}/cancel", cancel, methods=["POST"]),
        Route("/v1/refunds", create_refund, methods=["POST"]),
        Route("/v1/refunds", list_refunds, methods=["GET"]),
        Route("/v1/refunds/{refund}", retrieve_refund, methods=["GET"]),
        Route("/v1/balance_transactions", list_balance_transactions, methods=["GET"]),
        Route("/v1/events", list_events, methods=["GET"]),
        Route("/v1/events/{event}", retrieve_event, methods=["GET"]),
        *admin.routes(simulator),
        Route("/{path:path}", unrecognized, methods=_ALL_METHODS),
    ]
    app = Starlette(routes=routes)
    app.state.simulator = simulator
    return app
