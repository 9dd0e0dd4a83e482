"""Relay throughput: webhook deliveries per second from ``payorch relay`` processes to a
receiver on 127.0.0.1 that verifies every signature (issue 13's bench figure).

    .venv/bin/python -m bench.webhooks [--events N] [--relays R] [--concurrency C]

On its own PostgreSQL database: a merchant with one endpoint, ``--events`` events written
through the outbox insert the finishing transaction uses (100 payments finished through the
real charge code with a fake provider, then more events of the same payments), then the
relays start and the clock runs from the first attempt to the last recorded one (so process
start-up is not counted).  The receiver answers 200 at once: this is the relay's own cost
(claim, sign, POST, record; no keep-alive, by design), not a merchant's.  It runs in this
process, so its Python competes with the relays for the two cores like everything else here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import services
from orchestrator.db.tables import webhook_deliveries, webhook_delivery_attempts
from tests.fakes.provider import FakeProvider
from tests.harness.containers import TEST_SECRET_KEY, build_container
from tests.harness.seeds import new_merchant
from tests.integration.webhook_helpers import finished_payment
from tests.support.locking import SERVICE_LOCK
from tests.support.processes import ProcessManager
from tests.support.webhook_receiver import WebhookReceiver

SEED_PAYMENTS = 100


def _delivered(container: Any) -> int:
    with container.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(webhook_deliveries)
                .where(webhook_deliveries.c.status == "delivered")
            ).scalar_one()
        )


def _window(container: Any) -> tuple[float, int]:
    a = webhook_delivery_attempts.c
    with container.engine.connect() as conn:
        first, last, attempts = conn.execute(
            sa.select(sa.func.min(a.started_at), sa.func.max(a.created_at), sa.func.count())
        ).one()
    return (last - first).total_seconds(), int(attempts)


def measure_relay(*, events: int, relays: int, concurrency: int, log_dir: Path) -> dict[str, Any]:
    with services.scratch_database() as url:
        settings = {"webhook_allow_private": True, "relay_concurrency": concurrency}
        container = build_container(url, provider=FakeProvider(), **settings)
        try:
            with WebhookReceiver() as receiver:
                merchant = new_merchant(container)
                created = container.endpoint_service().create(
                    merchant.id, url=receiver.url, events=["*"], description="bench"
                )
                receiver.secrets.append(created.secret)
                payment_ids = [
                    finished_payment(container, merchant, f"bench-{n}")
                    for n in range(SEED_PAYMENTS)
                ]
                with container.uow() as uow:
                    for n in range(events - SEED_PAYMENTS):
                        uow.outcomes.add_outbox_event(
                            payment_ids[n % SEED_PAYMENTS],
                            "refund.succeeded",
                            {"id": f"rfd_bench_{n}", "object": "refund", "amount": 100},
                            now=uow.now(),
                        )
                    uow.commit()
                env = {
                    "PAYORCH_ENV": "test",
                    "PAYORCH_SECRET_KEY": TEST_SECRET_KEY,
                    "PAYORCH_DATABASE_URL": url,
                    "PAYORCH_LOG_LEVEL": "WARNING",
                    "PAYORCH_WEBHOOK_ALLOW_PRIVATE": "true",
                    "PAYORCH_RELAY_CONCURRENCY": str(concurrency),
                    "PAYORCH_RELAY_IDLE_SECONDS": "0.05",
                }
                processes = ProcessManager(log_dir)
                try:
                    for number in range(relays):
                        processes.payorch("relay", name=f"relay-{number}", env=env)
                    deadline = time.monotonic() + 600
                    while _delivered(container) < events:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"only {_delivered(container)} of {events}")
                        time.sleep(0.2)
                finally:
                    processes.stop_all()
                seconds, attempts = _window(container)
                verified = len(receiver.verified_ids())
                unverified = len(receiver.unverified())
        finally:
            container.close()
    return {
        "events": events,
        "relays": relays,
        "concurrency_per_relay": concurrency,
        "attempts": attempts,
        "seconds": round(seconds, 3),
        "deliveries_per_second": round(events / seconds, 1) if seconds > 0 else None,
        "verified_events": verified,
        "unverified_requests": unverified,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--relays", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=8)
    options = parser.parse_args(argv)
    for line in services.ensure():
        print(f"services: {line}", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="payorch-bench-relay-") as logs:
        for relays in options.relays:
            with SERVICE_LOCK.held():
                figures = measure_relay(
                    events=options.events,
                    relays=relays,
                    concurrency=options.concurrency,
                    log_dir=Path(logs) / f"relays-{relays}",
                )
            print(json.dumps(figures), flush=True)
            results.append(figures)
    return 0 if all(r["unverified_requests"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
