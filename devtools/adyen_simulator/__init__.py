"""An Adyen-compatible simulator (Checkout API v71 subset and standard notifications) with
the Stripe simulator's fault language (``devtools/simulator``).

    config.py         AdyenSimulatorConfig: seed, start-up faults, keys, notification URL
                      and HMAC key, retry timings
    faults.py         fault rules, their ``OP:MODE[:P][:k=v]`` syntax, the seeded FaultBook
    testdata.py       Adyen's test cards, holderName outcomes and refusal reasons
    errors.py         Adyen's error bodies (ServiceError)
    idempotency.py    Adyen's idempotency layer per API key (replay, 422/704 in flight)
    state.py          the account: authorise, 3-D Secure details, captures, cancels,
                      technical cancels, refunds, reversals; the money log
    settlement.py     settlement batches and their Settlement details report (CSV)
    notifications.py  HMAC-signed notification delivery with drop / duplicate / reorder / delay
    core.py           the request pipeline (auth, faults, idempotency, effect, answer)
    app.py            the ASGI app (``create_app``); admin.py the ``/_sim`` routes
    server.py         ``start_in_thread`` / ``serve`` with uvicorn
    client.py         ``AdyenSimulatorAdmin``, a client for ``/_sim``
    sink.py           ``NotificationSink``, a notification endpoint for tests

The HMAC scheme is ``orchestrator.providers.adyen_hmac`` (the production side verifies with
it).  Nothing here imports the ``Adyen`` library.
"""

from __future__ import annotations

from devtools.adyen_simulator.app import API_VERSION, create_app
from devtools.adyen_simulator.client import AdyenSimulatorAdmin
from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.faults import FaultRule, parse_fault_spec
from devtools.adyen_simulator.server import RunningAdyenSimulator, serve, start_in_thread
from devtools.adyen_simulator.sink import NotificationSink
from devtools.adyen_simulator.state import three_ds_result

__all__ = [
    "API_VERSION",
    "AdyenSimulatorAdmin",
    "AdyenSimulatorConfig",
    "FaultRule",
    "NotificationSink",
    "RunningAdyenSimulator",
    "create_app",
    "parse_fault_spec",
    "serve",
    "start_in_thread",
    "three_ds_result",
]
