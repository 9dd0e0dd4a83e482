"""One bench run: every scenario, in order, each on a fresh stack; then the table and JSON.

    1  accept path      PostgreSQL + RabbitMQ, then the embedded default's SQLite
    3  retry storm      PostgreSQL + RabbitMQ (on the same stack as 1, after it)
    2  end to end       PostgreSQL + RabbitMQ, then the embedded default (the demo's stack)
    4  takeover         PostgreSQL + RabbitMQ, its own short-lease stack
    5  polling          PostgreSQL + RabbitMQ (on the same stack as 1, after 3)
    6  latency          PostgreSQL + RabbitMQ, a simulator answering after --latency-ms,
                        a fresh stack per worker configuration
    7  cpu              PostgreSQL + RabbitMQ, the default worker's CPU per payment with a
                        simulator answering at once (issue 14's goal 2), three rounds,
                        a fresh stack each
    8  backlog          PostgreSQL + RabbitMQ, a backlog drained at once and one that waited
                        several dispatch leases: messages per payment, drain ratio
    9  outage           PostgreSQL + RabbitMQ, the provider down for --outage-seconds under
                        --outage-rate payments/s, per variant (5xx, timeout), a fresh stack
                        each; minutes long, so run only when named (--only outage)

PostgreSQL and RabbitMQ are shared with every test session on the machine.  While a
scenario measures, the bench holds the test suite's service lock, so an outage test of
another session waits instead of stopping the database mid-measurement.  (Other sessions'
CPU use cannot be held off: the load average at the start is in the JSON.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import calibrate, report, services
from bench.accept import measure_accept
from bench.backlog import measure_backlog
from bench.latency import measure_latency, parse_worker_args
from bench.outage import measure_outage
from bench.outage_verdict import VARIANTS, parse_variants
from bench.polling import measure_polling
from bench.stack import ROOT, production_stack, sqlite_stack
from bench.storm import measure_storm
from bench.takeover import measure_takeover
from bench.throughput import measure_embedded, measure_production
from tests.support.locking import SERVICE_LOCK

SCENARIOS = (
    "accept",
    "storm",
    "end_to_end",
    "takeover",
    "polling",
    "latency",
    "cpu",
    "backlog",
)
# Scenarios a plain ``payorch bench`` leaves out: each takes minutes (``--only`` runs them).
ON_REQUEST = ("outage",)
KNOWN = SCENARIOS + ON_REQUEST
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class BenchOptions:
    scenarios: tuple[str, ...] = SCENARIOS
    embedded: bool = True
    concurrency: int = 50
    accept_seconds: float = 8.0
    accept_rounds: int = 2
    payments: int = 1000
    noops: int = 3000
    worker_concurrency: int = 4
    embedded_workers: int = 8
    storm_size: int = 200
    storm_rounds: int = 5
    takeover_samples: int = 5
    polling_seconds: float = 8.0
    polling_rounds: int = 2
    latency_seconds: float = 0.3
    latency_payments: int = 1000
    # Worker argument lists to measure at latency; () is the default ``payorch worker``.
    latency_workers: tuple[tuple[str, ...], ...] = ((),)
    # Payments of the zero-latency CPU run: enough that each of the worker's threads runs
    # many, so the steady window is not its threads' first tasks.
    cpu_payments: int = 3000
    # Rounds of the CPU run, each on a fresh stack; the verdict takes their median: one
    # round's figure moves with the host's slow spells (docs/performance.md).
    cpu_rounds: int = 3
    # The deep-backlog scenario: payments per backlog, how many dispatch leases the deep one
    # waits before a worker starts, and the provider's latency.
    backlog_payments: int = 3000
    backlog_deep_leases: int = 5
    backlog_latency_seconds: float = 0.3
    # The provider outage (issue 41's acceptance): its variants, arrival rate, length, and
    # the healthy backlog that measures the pool's speed beside it.
    outage_variants: tuple[str, ...] = tuple(VARIANTS)
    outage_rate: float = 10.0
    outage_seconds: float = 180.0
    outage_reference_payments: int = 1000
    output: Path = field(default=RESULTS / "latest.json")

    def quick(self) -> BenchOptions:
        """A smoke run in a few minutes: the figures are noisier, the code paths the same."""
        return dataclasses.replace(
            self,
            accept_seconds=2.0,
            accept_rounds=1,
            payments=200,
            noops=500,
            storm_rounds=1,
            takeover_samples=1,
            polling_seconds=2.0,
            polling_rounds=1,
            latency_payments=min(self.latency_payments, 300),
            cpu_payments=min(self.cpu_payments, 500),
            cpu_rounds=1,
            backlog_payments=min(self.backlog_payments, 500),
            outage_seconds=min(self.outage_seconds, 30.0),
            outage_reference_payments=min(self.outage_reference_payments, 300),
        )


def options_from_cli(
    *,
    only: list[str] | None,
    embedded: bool,
    quick: bool,
    payments: int,
    worker_concurrency: int,
    output: Path | None,
    latency_ms: float = 300.0,
    latency_payments: int = 1000,
    latency_workers: list[str] | None = None,
    cpu_payments: int = 3000,
    cpu_rounds: int = 3,
    outage_variants: list[str] | None = None,
    outage_rate: float = 10.0,
    outage_seconds: float = 180.0,
) -> BenchOptions:
    """The options of ``payorch bench`` (orchestrator/cli/bench.py).  ValueError for an
    unknown scenario or outage variant."""
    unknown = set(only or ()) - set(KNOWN)
    if unknown:
        raise ValueError(f"unknown scenarios {sorted(unknown)}; known: {', '.join(KNOWN)}")
    options = BenchOptions(
        scenarios=tuple(only) if only else SCENARIOS,
        embedded=embedded,
        payments=payments,
        worker_concurrency=worker_concurrency,
        latency_seconds=latency_ms / 1000,
        latency_payments=latency_payments,
        latency_workers=parse_worker_args(latency_workers),
        cpu_payments=cpu_payments,
        cpu_rounds=cpu_rounds,
        outage_variants=parse_variants(outage_variants),
        outage_rate=outage_rate,
        outage_seconds=outage_seconds,
        output=output or RESULTS / "latest.json",
    )
    return options.quick() if quick else options


Figures = dict[str, dict[str, Any]]  # {scenario: {setup: figures}}


@dataclass(frozen=True)
class Step:
    title: str
    run: Callable[[], Figures]
    uses_services: bool = True


@contextmanager
def measuring(console: Console, step: Step) -> Iterator[None]:
    """Print what is measured and how long it took; hold the test suite's service lock
    while a step that uses PostgreSQL and RabbitMQ runs (the embedded steps need neither)."""
    console.print(f"[bold]{step.title}[/] …")
    started = time.monotonic()
    with SERVICE_LOCK.held() if step.uses_services else contextlib.nullcontext():
        yield
    console.print(f"  done in {time.monotonic() - started:.0f} s")


def _accept_and_storm(options: BenchOptions, logs: Path) -> Figures:
    wanted = set(options.scenarios)
    figures: Figures = {}
    with production_stack(logs / "accept") as stack:
        cpu_of = {"api": stack.start_api().pid}
        if stack.settings.wake_up_mode == "notify":
            # The wake-ups' publishes (off the request) share the cores with the API.
            cpu_of["dispatcher"] = stack.start_dispatcher().pid
        if "accept" in wanted:
            figures["accept"] = {
                "postgres": measure_accept(
                    stack.api_url,
                    stack.merchant_key,
                    concurrency=options.concurrency,
                    seconds=options.accept_seconds,
                    rounds=options.accept_rounds,
                    cpu_of=cpu_of,
                    compare_threads=True,
                )
            }
        if "storm" in wanted:
            figures["storm"] = {
                "postgres": measure_storm(
                    stack.api_url,
                    stack.merchant_key,
                    size=options.storm_size,
                    rounds=options.storm_rounds,
                )
            }
        if "polling" in wanted:
            figures["polling"] = {
                "postgres": measure_polling(
                    stack.api_url,
                    stack.merchant_key,
                    concurrency=options.concurrency,
                    seconds=options.polling_seconds,
                    rounds=options.polling_rounds,
                )
            }
    return figures


def _accept_embedded(options: BenchOptions, logs: Path, scratch: Path) -> Figures:
    directory = scratch / "accept-sqlite"
    directory.mkdir()
    with sqlite_stack(logs / "accept-sqlite", directory) as stack:
        stack.start_api()
        figures = measure_accept(
            stack.api_url,
            stack.merchant_key,
            concurrency=options.concurrency,
            seconds=options.accept_seconds,
            rounds=options.accept_rounds,
        )
    return {"accept": {"embedded": figures}}


def _end_to_end(options: BenchOptions, logs: Path) -> Figures:
    with production_stack(logs / "end-to-end") as stack:
        stack.start_api()
        figures = measure_production(
            stack,
            payments_count=options.payments,
            noops=options.noops,
            worker_concurrency=options.worker_concurrency,
        )
    return {"end_to_end": {"postgres": figures}}


def _end_to_end_embedded(options: BenchOptions, logs: Path, scratch: Path) -> Figures:
    directory = scratch / "end-to-end-embedded"
    directory.mkdir()
    figures = measure_embedded(
        logs / "end-to-end-embedded",
        directory,
        payments_count=options.payments,
        noops=options.noops,
        workers=options.embedded_workers,
    )
    return {"end_to_end": {"embedded": figures}}


def _takeover(options: BenchOptions, logs: Path) -> Figures:
    return {"takeover": {"postgres": measure_takeover(logs, samples=options.takeover_samples)}}


def _latency(options: BenchOptions, logs: Path) -> Figures:
    figures: dict[str, Any] = {}
    for n, worker_args in enumerate(options.latency_workers):
        tag = f"w{n}"
        fault = f"any:latency:seconds={options.latency_seconds}"
        with production_stack(logs / f"latency-{tag}", simulator_faults=(fault,)) as stack:
            stack.start_api()
            figures[tag] = measure_latency(
                stack,
                latency_seconds=options.latency_seconds,
                payments_count=options.latency_payments,
                worker_args=worker_args,
                tag=tag,
            )
        _print_latency_run(figures[tag])
    return {"latency": figures}


def _cpu(options: BenchOptions, logs: Path) -> Figures:
    """The default worker against a simulator that answers at once: what a payment costs
    the worker's CPU when nothing waits (the sleeping task of 0 s beside it is the pool's
    own cost per task).  ``cpu_rounds`` rounds, each on a fresh stack."""
    rounds = []
    for n in range(options.cpu_rounds):
        before = calibrate.reference_ms()
        with production_stack(logs / f"cpu-{n}") as stack:
            stack.start_api()
            figures = measure_latency(
                stack,
                latency_seconds=0.0,
                payments_count=options.cpu_payments,
                worker_args=(),
                tag=f"cpu-{n}",
            )
        # The machine's speed around the round (bench/calibrate.py): the same code's figure
        # moves with it, by up to 2x on the project's VM.
        figures["reference_work_ms"] = [before, calibrate.reference_ms()]
        _print_latency_run(figures)
        rounds.append(figures)
    return {"cpu": {"postgres": {"worker": rounds[0]["worker"], "rounds": rounds}}}


def _backlog(options: BenchOptions, logs: Path) -> Figures:
    figures = measure_backlog(
        logs,
        payments_count=options.backlog_payments,
        latency_seconds=options.backlog_latency_seconds,
        deep_leases=options.backlog_deep_leases,
    )
    return {"backlog": {"postgres": figures}}


def _outage(options: BenchOptions, logs: Path) -> Figures:
    figures = measure_outage(
        logs,
        variants=options.outage_variants,
        rate=options.outage_rate,
        outage_seconds=options.outage_seconds,
        reference_payments=options.outage_reference_payments,
    )
    return {"outage": figures}


def _print_latency_run(done: dict[str, Any]) -> None:
    """Each run as it ends: a long bench stopped halfway keeps what it measured."""
    print(
        f"  {done['worker']}: {done['payments']['per_second']} payments/s, sleeping task "
        f"{done['sleep']['per_second']}/s, ratio {done['ratio']}, peak RSS "
        f"{done['peak_rss_mib']} MiB (PSS {done.get('peak_pss_mib')} MiB) at "
        f"{done['peak_in_flight']} in flight, "
        f"{done['worker_cpu_ms_per_payment']} ms CPU/payment "
        f"({done.get('worker_cpu_ms_per_payment_steady')} steady), "
        f"{done.get('worker_context_switches_per_payment_steady')} context switches/payment, "
        f"db {done['database_per_payment']}"
        f", max connections checked out {done['database'].get('max_checked_out')}, "
        f"load {os.getloadavg()[0]:.1f}"
        + (
            f", reference work {done['reference_work_ms']} ms"
            if "reference_work_ms" in done
            else ""
        ),
        flush=True,
    )


def _steps(options: BenchOptions, logs: Path, scratch: Path) -> list[Step]:
    wanted = set(options.scenarios)
    steps: list[Step] = []
    if wanted & {"accept", "storm", "polling"}:
        steps.append(
            Step(
                "accept path, retry storm and polling, PostgreSQL + RabbitMQ",
                lambda: _accept_and_storm(options, logs),
            )
        )
    if "accept" in wanted and options.embedded:
        steps.append(
            Step(
                "accept path, embedded default (SQLite)",
                lambda: _accept_embedded(options, logs, scratch),
                uses_services=False,
            )
        )
    if "end_to_end" in wanted:
        steps.append(Step("end to end, PostgreSQL + RabbitMQ", lambda: _end_to_end(options, logs)))
        if options.embedded:
            steps.append(
                Step(
                    "end to end, embedded default",
                    lambda: _end_to_end_embedded(options, logs, scratch),
                    uses_services=False,
                )
            )
    if "takeover" in wanted:
        steps.append(
            Step(
                "takeover latency, PostgreSQL + RabbitMQ",
                lambda: _takeover(options, logs / "takeover"),
            )
        )
    if "latency" in wanted:
        steps.append(
            Step(
                f"provider latency {options.latency_seconds * 1000:.0f} ms, PostgreSQL + RabbitMQ",
                lambda: _latency(options, logs / "latency"),
            )
        )
    if "cpu" in wanted:
        steps.append(
            Step(
                "worker CPU per payment at zero provider latency, PostgreSQL + RabbitMQ",
                lambda: _cpu(options, logs),
            )
        )
    if "backlog" in wanted:
        steps.append(
            Step(
                "deep backlog, PostgreSQL + RabbitMQ",
                lambda: _backlog(options, logs / "backlog"),
            )
        )
    if "outage" in wanted:
        steps.append(
            Step(
                f"provider outage {options.outage_seconds:.0f} s at {options.outage_rate:g} "
                f"payments/s ({', '.join(options.outage_variants)}), PostgreSQL + RabbitMQ",
                lambda: _outage(options, logs / "outage"),
            )
        )
    return steps


def run(options: BenchOptions, console: Console) -> dict[str, Any]:
    """Every wanted step; a step that fails is recorded under ``errors`` and the others still
    run (a crashed scenario must not cost the figures of the rest)."""
    results: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "revision": report.git_revision(ROOT),
        "machine": report.machine(),
        "options": {k: str(v) for k, v in dataclasses.asdict(options).items()},
    }
    for line in services.ensure():
        console.print(f"services: {line}")
    with tempfile.TemporaryDirectory(prefix="payorch-bench-") as directory:
        for step in _steps(options, RESULTS / "logs", Path(directory)):
            try:
                with measuring(console, step):
                    for scenario, by_setup in step.run().items():
                        results.setdefault(scenario, {}).update(by_setup)
            except Exception as error:
                results.setdefault("errors", {})[step.title] = f"{type(error).__name__}: {error}"
                console.print(f"  [red]failed[/]: {type(error).__name__}: {error}")
    results["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["targets"] = report.verdicts(results)
    return results


def exit_on_sigterm() -> None:
    """A SIGTERM (a timeout, a supervisor, a closed session) ends the run as an exit does, so
    every stack's ``with`` stops its processes and drops its database and vhost.  Python's
    default is to die on the spot: a bench stopped that way left its API, worker, sweeper
    and simulator running, and its database and vhost behind."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def main(options: BenchOptions, console: Console | None = None) -> int:
    exit_on_sigterm()
    # Wide enough for the table when the output is a file or a pipe (rich assumes 80).
    console = console or Console(width=None if Console().is_terminal else 132)
    results = run(options, console)
    report.write_json(results, options.output)
    stamped = options.output.parent / f"bench-{results['started_at'].replace(':', '')}.json"
    report.write_json(results, stamped)
    report.render(results, console)
    console.print(f"JSON: {options.output} (and {stamped.name})")
    return 1 if results.get("errors") else 0
