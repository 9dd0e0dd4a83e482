"""Liveness and readiness.  Metrics are not here: ``payorch api --metrics-port`` serves them
on a port of their own (``orchestrator.ops.metrics_server``), which need not be reachable
from wherever the API's port is."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from orchestrator.api.deps import ContainerDep
from orchestrator.api.problems import Problem
from orchestrator.api.responses import problem
from orchestrator.bootstrap import Container

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The API can accept payments: the database (and the broker, if the API publishes)",
    responses={503: problem("A dependency the accept needs is unreachable")},
)
def readyz(container: ContainerDep) -> JSONResponse:
    checks = {
        "database": _database_ok(container),
        "broker": container.publisher.broker_reachable(),
    }
    # Under WAKE_UP=notify an accept needs only the database: the dispatcher publishes, and
    # a broker outage delays wake-ups without refusing a payment.  Failing readiness then
    # would make a load balancer drop every API at once for something the API does not need;
    # the broker's state is still reported.  Under `publish` the accept publishes itself.
    required = ["database"] if container.settings.wake_up_mode == "notify" else list(checks)
    down = ", ".join(name for name in required if not checks[name])
    if down:
        raise Problem(
            503,
            "service-unavailable",
            f"Not ready: {down} unreachable.",
            headers={"Retry-After": "5"},
            checks=checks,
        )
    return JSONResponse({"status": "ready", "checks": checks})


def _database_ok(container: Container) -> bool:
    try:
        with container.engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
        return True
    except Exception:
        return False
