"""``payorch bench``: the benchmark (bench/README.md; its method and figures: docs/performance.md).

The harness lives in the source checkout's ``bench/`` package, next to ``tests/``, and is
not part of the wheel: it starts and stops PostgreSQL and RabbitMQ with the test suite's
helpers (``tests/support``), which only a checkout has.  This command finds the checkout
this package was installed from (``pip install -e .``), imports the harness lazily, and
says so plainly when there is none.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import orchestrator


def checkout_root() -> Path | None:
    root = Path(orchestrator.__file__).resolve().parent.parent
    has_harness = (root / "bench" / "__init__.py").is_file()
    return root if has_harness and (root / "tests" / "support").is_dir() else None


def bench(
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="Run only these scenarios (repeatable): accept, storm, end_to_end, "
            "takeover, polling, latency, cpu, backlog; and outage (minutes long: only when named).",
        ),
    ] = None,
    embedded: Annotated[
        bool, typer.Option(help="Also measure 1 and 2 on the embedded default (SQLite).")
    ] = True,
    quick: Annotated[
        bool, typer.Option("--quick", help="A smoke run (a few minutes); noisier figures.")
    ] = False,
    payments: Annotated[int, typer.Option(help="Payments in the end-to-end run.", min=50)] = 1000,
    worker_concurrency: Annotated[
        int, typer.Option(help="Pool processes of the measured worker.", min=1)
    ] = 4,
    latency_ms: Annotated[
        float,
        typer.Option(help="Provider latency per call in the latency scenario (ms).", min=0),
    ] = 300.0,
    latency_payments: Annotated[
        int, typer.Option(help="Payments (and sleeping tasks) per latency run.", min=50)
    ] = 1000,
    latency_worker: Annotated[
        list[str] | None,
        typer.Option(
            "--latency-worker",
            help="Worker arguments to measure at latency, e.g. '--pool prefork "
            "--concurrency 8' (repeatable; default: the default payorch worker).",
        ),
    ] = None,
    cpu_payments: Annotated[
        int,
        typer.Option(
            help="Payments in the zero-latency run that measures the worker's CPU per payment.",
            min=50,
        ),
    ] = 3000,
    cpu_rounds: Annotated[
        int,
        typer.Option(
            help="Rounds of that run, each on a fresh stack; the verdict takes their median.",
            min=1,
        ),
    ] = 3,
    outage_variant: Annotated[
        list[str] | None,
        typer.Option(
            "--outage-variant",
            help="Provider outage to wait out in the outage scenario: 5xx (every call "
            "answered 500) or timeout (no call answered); repeatable, default both.",
        ),
    ] = None,
    outage_rate: Annotated[
        float, typer.Option(help="Payments per second arriving in the outage scenario.", min=0.1)
    ] = 10.0,
    outage_seconds: Annotated[
        float, typer.Option(help="How long the provider is down in the outage scenario.", min=1)
    ] = 180.0,
    output: Annotated[
        Path | None,
        typer.Option(help="Where to write the JSON (default bench/results/latest.json)."),
    ] = None,
) -> None:
    """Measure the accept path, end-to-end throughput, the retry storm, takeover latency,
    polling with and without If-None-Match, throughput at provider latency and the worker's
    CPU per payment on
    PostgreSQL + RabbitMQ (started, or installed, when missing) and the embedded default;
    print a table and write JSON.
    Needs a source checkout."""
    root = checkout_root()
    if root is None:
        typer.echo(
            "payorch bench needs a source checkout (bench/ and tests/support/ next to "
            "orchestrator/): clone the repository and run 'make bench' there.",
            err=True,
        )
        raise typer.Exit(2)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    run: Any = importlib.import_module("bench.run")
    try:
        options = run.options_from_cli(
            only=only,
            embedded=embedded,
            quick=quick,
            payments=payments,
            worker_concurrency=worker_concurrency,
            output=output,
            latency_ms=latency_ms,
            latency_payments=latency_payments,
            latency_workers=latency_worker,
            cpu_payments=cpu_payments,
            cpu_rounds=cpu_rounds,
            outage_variants=outage_variant,
            outage_rate=outage_rate,
            outage_seconds=outage_seconds,
        )
    except ValueError as error:
        hint = "--outage-variant" if "variant" in str(error) else "--only"
        raise typer.BadParameter(str(error), param_hint=hint) from None
    raise typer.Exit(run.main(options))
