"""The ASGI app: Adyen's Checkout API v71 subset, under the test root (``/v71``) and the
live shape (``/checkout/v71``), and the admin API under ``/_sim``.

    POST /v71/payments                                  authorise
    POST /v71/payments/details                          complete 3-D Secure
    POST /v71/payments/{paymentPspReference}/captures   capture (manual capture)
    POST /v71/payments/{paymentPspReference}/cancels    cancel an authorisation
    POST /v71/payments/{paymentPspReference}/refunds    refund
    POST /v71/payments/{paymentPspReference}/reversals  cancel or refund
    POST /v71/cancels                                   technical cancel by paymentReference

    GET /reports/download/MerchantAccount/{merchantAccount}/settlement_detail_report_batch_{n}.csv
                                                        a closed batch's Settlement details
                                                        report (``settlement.py``)

Anything else answers 404 in Adyen's error shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from devtools.adyen_simulator import admin, errors
from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.core import AdyenSimulator
from devtools.adyen_simulator.faults import Operation

API_VERSION = "v71"
REPORT_PATH = (
    "/reports/download/MerchantAccount/{merchant}/settlement_detail_report_batch_{batch:int}.csv"
)
ROOTS = (f"/{API_VERSION}", f"/checkout/{API_VERSION}")
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

_PATHS: tuple[tuple[str, Operation], ...] = (
    ("/payments", "payments"),
    ("/payments/details", "details"),
    ("/payments/{psp}/captures", "capture"),
    ("/payments/{psp}/cancels", "cancel"),
    ("/payments/{psp}/refunds", "refund"),
    ("/payments/{psp}/reversals", "reversal"),
    ("/cancels", "technical_cancel"),
)


def create_app(config: AdyenSimulatorConfig | None = None) -> Starlette:
    """A fresh simulator as an ASGI app; ``app.state.simulator`` is its ``AdyenSimulator``."""
    simulator = AdyenSimulator(config or AdyenSimulatorConfig())

    def endpoint(operation: Operation) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            return await simulator.handle(request, operation, request.path_params.get("psp"))

        return handle

    async def unrecognized(request: Request) -> Response:
        error = errors.not_found(request.method, request.url.path)
        return JSONResponse(error.body(), status_code=error.status)

    async def settlement_report(request: Request) -> Response:
        try:
            lines = simulator.settlement_report(
                request, request.path_params["merchant"], request.path_params["batch"]
            )
        except errors.AdyenError as error:
            return JSONResponse(error.body(), status_code=error.status)
        return StreamingResponse(iterate_in_threadpool(lines), media_type="text/csv")

    routes = [
        Route(root + path, endpoint(operation), methods=["POST"])
        for root in ROOTS
        for path, operation in _PATHS
    ]
    app = Starlette(
        routes=[
            *routes,
            Route(REPORT_PATH, settlement_report, methods=["GET"]),
            *admin.routes(simulator),
            Route("/{path:path}", unrecognized, methods=_ALL_METHODS),
        ]
    )
    app.state.simulator = simulator
    return app
