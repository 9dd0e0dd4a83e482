"""A Stripe-compatible simulator (PaymentIntents, refunds, events, webhooks) with fault
injection (``payorch provider-sim``).

    config.py        SimulatorConfig: seed, start-up faults, stall/hang/search-lag durations
    faults.py        fault rules, their ``OP:MODE[:P][:k=v]`` syntax, the seeded FaultBook
    forms.py         Stripe's form encoding (``metadata[k]=v``) decoded
    cards.py         Stripe's test payment methods (pm_card_visa, pm_card_chargeDeclined, …)
    models.py        intents, charges, refunds, disputes, money movements (status diagram)
    objects.py       object shapes from Stripe's fixtures (payment_intent, refund, charge,
                     event, dispute .json)
    errors.py        Stripe's error bodies, and which of them are saved under a key
    search.py        the subset of Stripe's search query language
    params.py        Stripe's parameter rules (strings, integers, limits, metadata)
    intent_requests.py  what create / confirm / capture / cancel accept (validation)
    state.py         the account: execute create / confirm / capture / cancel / retrieve /
                     list / search; 3-D Secure, asynchronous settlement, disputes
    refunds.py       refunds: create / retrieve / list, later transitions, the money log
    events.py        Stripe's events (/v1/events) made by every change
    webhooks.py      signed webhook delivery with drop / duplicate / reorder / delay
    idempotency.py   Stripe's idempotency layer per API key (replay, 409, idempotency_error)
    requestlog.py    the ordered request log
    core.py          the request pipeline (auth, faults, idempotency, effect, answer)
    app.py           the ASGI app (``create_app``); admin.py the ``/_sim`` routes
    server.py        ``start_in_thread`` / ``serve`` with uvicorn
    client.py        ``SimulatorAdmin``, a client for ``/_sim``

Nothing here imports ``stripe``: the simulator is tested through the real SDK from outside.
"""

from __future__ import annotations

from devtools.simulator.app import create_app
from devtools.simulator.client import SimulatorAdmin
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.faults import FaultRule, parse_fault_spec
from devtools.simulator.server import RunningSimulator, serve, start_in_thread

__all__ = [
    "FaultRule",
    "RunningSimulator",
    "SimulatorAdmin",
    "SimulatorConfig",
    "create_app",
    "parse_fault_spec",
    "serve",
    "start_in_thread",
]
