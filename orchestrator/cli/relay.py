"""``payorch relay [--once]``: deliver merchant webhooks from the outbox.

Run as many as you like (on several hosts): deliveries are leased with ``FOR UPDATE SKIP
LOCKED``, so two relays never attempt the same delivery at once.  SIGTERM finishes the
attempts in flight (at most one attempt's time) and exits.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from orchestrator import metrics, tracing
from orchestrator.bootstrap import bootstrap
from orchestrator.cli.config import load_settings
from orchestrator.cli.output import print_json, print_table
from orchestrator.cli.process_setup import MetricsHost, MetricsPort, serve_metrics
from orchestrator.cli.start_checks import refuse_unusable_services, service_fields
from orchestrator.engine.publisher import NullPublisher
from orchestrator.logging import capture_standard_logging


def relay(
    once: Annotated[
        bool, typer.Option("--once", help="One pass (fan-out, claim, attempt), print it, exit.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: print JSON.")] = False,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "127.0.0.1",
) -> None:
    """Deliver webhooks until SIGTERM or Ctrl-C (or one pass with --once)."""
    settings = load_settings()
    if not once:
        tracing.setup("payorch-relay")  # a long-running process: before its first connection
    # The relay publishes no Celery task: no broker connection.
    container = bootstrap(settings, publisher=NullPublisher())
    worker = container.relay()
    try:
        if once:
            report = worker.run_once()
            if as_json:
                print_json(report.as_dict())
            else:
                print_table(
                    "relay pass",
                    ["what", "count"],
                    [[key, str(value)] for key, value in report.as_dict().items()],
                )
            return
        capture_standard_logging(container.settings)
        # The loop retries a database lost later; one it cannot use at all ends the start
        # (decision 0100).  (--once needs no check: the CLI's boundary says it.)
        refuse_unusable_services("relay", container.settings, engine=container.engine)
        serve_metrics(metrics_port, metrics_host, metrics.Role.RELAY)
        stop = threading.Event()

        def _stop(_signum: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        worker.run(stop, started_with=service_fields(container.settings, broker=False))
    finally:
        worker.close()
        container.close()
        tracing.shutdown()
