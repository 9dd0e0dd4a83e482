"""The bench's output: one rich table for people, one JSON document for the record, and the
facts about the machine the figures came from."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import outage_verdict

# (1) >= 0.5 of bare throughput, (2) >= 0.5 of the no-op rate, (3) storm p99 <= 2x distinct
# p99, (4) kill -> completion within LEASE_SECONDS + SWEEP_INTERVAL_SECONDS.
ACCEPT_TARGET = 0.5
ACCEPT_P99_TARGET = 2.0
END_TO_END_TARGET = 0.5
STORM_TARGET = 2.0
# (6) at 300 ms per provider call: >= 0.5 of the sleeping task's rate and >= 100 payments/s.
LATENCY_TARGET = 0.5
LATENCY_RATE_TARGET = 100.0
# Worker CPU per payment at zero provider latency, over the steady window (issue 14, goal 2).
CPU_TARGET_MS = 5.0
# (8) a backlog of any age: <= 1.2 broker messages per payment, and the deep one drains at
# >= 0.9 of the shallow one's rate (issue 41).
BACKLOG_MESSAGES_TARGET = 1.2
BACKLOG_DRAIN_TARGET = 0.9


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def git_revision(root: Path) -> str | None:
    try:
        revision = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{revision}{'+dirty' if dirty else ''}"


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n")


def _verdict(met: bool | None) -> str:
    if met is None:
        return "n/a"
    return "[green]met[/]" if met else "[red]missed[/]"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _numbers(values: Iterable[float | None]) -> str:
    return ", ".join(_number(value) for value in values)


def _counts(values: Iterable[float | None]) -> str:
    return ", ".join("-" if value is None else f"{value:.0f}" for value in values)


def _reference_work(per_round: list[list[float] | None]) -> str:
    """The machine's speed around each round (bench/calibrate.py), when measured."""
    measured = [pair for pair in per_round if pair]
    if not measured:
        return ""
    return "\nreference work (ms)\n" + "\n".join(
        " / ".join(f"{ms:.1f}" for ms in pair) for pair in measured
    )


def _rate(summary: dict[str, Any]) -> str:
    return (
        f"{summary['rps']:.0f} req/s\np50 {summary['p50_ms']:.1f} ms, "
        f"p99 {summary['p99_ms']:.1f} ms"
    )


def _cpu_split(cpu: dict[str, float]) -> str:
    """``api 2.5, dispatcher 0.6, postgresql 0.8, rabbitmq 0.5; machine 4.9``."""
    parts = [f"{name} {ms:.2f}" for name, ms in cpu.items() if name != "machine"]
    return ", ".join(parts) + f"; machine {cpu['machine']:.2f}"


def verdicts(results: dict[str, Any]) -> dict[str, bool]:
    """Target met or not, per measured figure."""
    met: dict[str, bool] = {}
    for setup in ("postgres", "embedded"):
        accept = results.get("accept", {}).get(setup)
        if accept and accept.get("ratio") is not None:
            met[f"accept.{setup}"] = accept["ratio"] >= ACCEPT_TARGET
        if accept and accept.get("p99_ratio") is not None:
            met[f"accept_p99.{setup}"] = accept["p99_ratio"] <= ACCEPT_P99_TARGET
        end_to_end = results.get("end_to_end", {}).get(setup)
        if end_to_end and end_to_end.get("ratio") is not None and not transport_capped(end_to_end):
            met[f"end_to_end.{setup}"] = end_to_end["ratio"] >= END_TO_END_TARGET
    storm = results.get("storm", {}).get("postgres")
    if storm and storm.get("p99_ratio") is not None:
        met["storm.postgres"] = storm["p99_ratio"] <= STORM_TARGET
    takeover = results.get("takeover", {}).get("postgres")
    if takeover:
        met["takeover.postgres"] = (
            takeover["kill_to_completion"]["max_seconds"] <= takeover["bound_seconds"]
        )
    for tag, latency in results.get("latency", {}).items():
        if latency.get("ratio") is not None:
            met[f"latency.{tag}"] = (
                latency["ratio"] >= LATENCY_TARGET
                and latency["payments"]["per_second"] >= LATENCY_RATE_TARGET
            )
    backlog = results.get("backlog", {}).get("postgres")
    if backlog:
        met["backlog.postgres"] = (
            max(backlog[d]["messages_per_payment"] for d in ("shallow", "deep"))
            <= BACKLOG_MESSAGES_TARGET
            and (backlog["deep_to_shallow_drain"] or 0) >= BACKLOG_DRAIN_TARGET
        )
    cpu = results.get("cpu", {}).get("postgres")
    cpu_ms = cpu_per_payment(cpu) if cpu else None
    if cpu_ms is not None:
        met["cpu.postgres"] = cpu_ms <= CPU_TARGET_MS
    for variant, outage in results.get("outage", {}).items():
        for criterion, ok in outage_verdict.verdict(outage).items():
            met[f"outage.{variant}.{criterion}"] = ok
    return met


def cpu_per_payment(cpu: dict[str, Any]) -> float | None:
    """The figure goal 2 is judged on: the median over the rounds of each round's steady
    CPU per payment (the threads' first tasks and the drained tail left out), or of its
    whole run's when a round was too short to have a window."""
    figures = [f for f in (_round_cpu(r) for r in cpu.get("rounds", ())) if f is not None]
    return statistics.median(figures) if figures else None


def _round_cpu(run: dict[str, Any]) -> float | None:
    steady = run.get("worker_cpu_ms_per_payment_steady")
    return steady if steady is not None else run.get("worker_cpu_ms_per_payment")


def transport_capped(end_to_end: dict[str, Any]) -> bool:
    """The embedded no-op rate is about one task per worker thread per second: the in-memory
    transport's polling, not payorch, sets both rates (no verdict then)."""
    threads = end_to_end.get("worker_threads")
    return threads is not None and end_to_end["noop"]["per_second"] <= 1.5 * threads


def notes(results: dict[str, Any]) -> list[str]:
    """Caveats a reader of the table needs."""
    found = []
    embedded = results.get("end_to_end", {}).get("embedded")
    if embedded and transport_capped(embedded):
        found.append(
            f"embedded end to end: even the no-op task runs at "
            f"{embedded['noop']['per_second']:.0f}/s, about one task per worker thread per "
            "second: Celery's in-memory transport polls its queue once a second "
            "(kombu's default polling_interval), so the ratio says nothing about payorch"
        )
    for setup, accept in results.get("accept", {}).items():
        failed = {k: v for k, v in accept["ours"]["statuses"].items() if k not in ("200", "202")}
        if failed or accept["ours"]["errors"]:
            found.append(f"accept ({setup}): answers other than 202: {failed or accept['ours']}")
    return found


SETUPS = {"postgres": "PostgreSQL + RabbitMQ", "embedded": "embedded (SQLite, memory://)"}


def render(results: dict[str, Any], console: Console) -> None:
    met = verdicts(results)
    table = Table(title="payorch bench", show_lines=True)
    for column in ("scenario", "setup", "ours", "baseline", "ratio", "target", "verdict"):
        table.add_column(column)
    for setup, accept in results.get("accept", {}).items():
        table.add_row(
            f"1. accept path, {accept['concurrency']} clients",
            SETUPS[setup],
            _rate(accept["ours"]),
            "bare route: " + _rate(accept["bare"]),
            _number(accept["ratio"]),
            f">= {ACCEPT_TARGET}",
            _verdict(met.get(f"accept.{setup}")),
        )
        if accept.get("threads"):
            table.add_row(
                f"1. accept path, thread path only (comparison), {accept['concurrency']} clients",
                SETUPS[setup],
                _rate(accept["threads"]),
                "bare route: " + _rate(accept["bare"]),
                _number(accept.get("threads_ratio")),
                "(comparison)",
                "",
            )
        ours_cpu, bare_cpu = (accept[s].get("cpu_ms_per_request", {}) for s in ("ours", "bare"))
        if "machine" in ours_cpu and bare_cpu.get("api"):
            table.add_row(
                "1. accept path, CPU per request (ms)",
                SETUPS[setup],
                _cpu_split(ours_cpu),
                "bare route:\n" + _cpu_split(bare_cpu),
                _number(round(ours_cpu["api"] / bare_cpu["api"], 3)),
                "(API's, ours / bare)",
                "",
            )
        if accept.get("p99_ratio") is not None:
            table.add_row(
                f"1. accept path p99, {accept['concurrency']} clients",
                SETUPS[setup],
                f"p99 {accept['ours']['p99_ms']:.1f} ms",
                f"bare route: p99 {accept['bare']['p99_ms']:.1f} ms",
                _number(accept["p99_ratio"]),
                f"<= {ACCEPT_P99_TARGET}",
                _verdict(met.get(f"accept_p99.{setup}")),
            )
    for setup, e2e in results.get("end_to_end", {}).items():
        table.add_row(
            "2. end to end, zero-latency provider",
            SETUPS[setup],
            f"{e2e['payments']['per_second']:.0f} payments/s",
            f"no-op task:\n{e2e['noop']['per_second']:.0f} tasks/s",
            _number(e2e["ratio"]),
            f">= {END_TO_END_TARGET}",
            _verdict(met.get(f"end_to_end.{setup}")),
        )
    for setup, storm in results.get("storm", {}).items():
        table.add_row(
            f"3. retry storm, {storm['size']} concurrent",
            SETUPS[setup],
            f"identical keys\np99 {storm['identical']['p99_ms']:.0f} ms, "
            f"p50 {storm['identical']['p50_ms']:.0f} ms",
            f"distinct keys\np99 {storm['distinct']['p99_ms']:.0f} ms, "
            f"p50 {storm['distinct']['p50_ms']:.0f} ms",
            _number(storm["p99_ratio"]),
            f"<= {STORM_TARGET}",
            _verdict(met.get(f"storm.{setup}")),
        )
    for setup, takeover in results.get("takeover", {}).items():
        kill = takeover["kill_to_completion"]
        expiry = takeover["expiry_to_completion"]
        pickup = takeover.get("expiry_to_takeover", {}).get("max_seconds")
        table.add_row(
            "4. takeover, worker SIGKILLed mid-payment",
            SETUPS[setup],
            f"kill -> done\nmedian {kill['median_seconds']:.2f} s, max {kill['max_seconds']:.2f} s"
            f"\nlease expiry -> taken over: max {_number(pickup)} s"
            f"\nlease expiry -> done: max {expiry['max_seconds']:.2f} s",
            f"LEASE {takeover['lease_seconds']:.0f} s\n+ SWEEP "
            f"{takeover['sweep_interval_seconds']:.0f} s = {takeover['bound_seconds']:.0f} s",
            f"{kill['max_seconds'] / takeover['bound_seconds']:.2f}",
            "<= 1.0",
            _verdict(met.get(f"takeover.{setup}")),
        )
    for setup, polling in results.get("polling", {}).items():
        plain, conditional = polling["plain"], polling["if_none_match"]
        table.add_row(
            f"5. polling a processing payment, {polling['concurrency']} clients",
            SETUPS[setup],
            f"If-None-Match (304s)\n{_rate(conditional)}"
            f"\n{conditional['bytes_per_request']:.0f} bytes/request",
            f"plain GET (200s)\n{_rate(plain)}\n{plain['bytes_per_request']:.0f} bytes/request",
            f"{_number(polling['rps_ratio'])} (req/s)\n{_number(polling['bytes_ratio'])} (bytes)",
            "-",
            "-",
        )
    for tag, latency in results.get("latency", {}).items():
        per = latency.get("database_per_payment", {})
        table.add_row(
            f"6. provider latency {latency['latency_seconds'] * 1000:.0f} ms per call",
            latency["worker"],
            f"{latency['payments']['per_second']:.1f} payments/s"
            f"\npeak RSS {latency['peak_rss_mib']:.0f} MiB (PSS "
            f"{_number(latency.get('peak_pss_mib'))} MiB), {latency['peak_in_flight']} in flight"
            f"\n= {_number(latency['rss_mib_per_100_in_flight'])} MiB per 100 in flight"
            f"\nworker CPU {latency['worker_cpu_ms_per_payment']:.1f} ms/payment"
            f" ({_number(latency.get('worker_cpu_ms_per_payment_steady'))} steady)"
            f"\n{_counts([latency.get('worker_context_switches_per_payment_steady')])}"
            " context switches/payment"
            f"\n{per.get('transactions', 0):.1f} transactions, "
            f"{per.get('round_trips', 0):.1f} round trips/payment",
            f"{latency['sleep']['seconds']:.1f} s sleeping task:"
            f"\n{latency['sleep']['per_second']:.1f} tasks/s",
            _number(latency["ratio"]),
            f">= {LATENCY_TARGET} and\n>= {LATENCY_RATE_TARGET:.0f}/s",
            _verdict(met.get(f"latency.{tag}")),
        )
    for setup, backlog in results.get("backlog", {}).items():
        shallow, deep = backlog["shallow"], backlog["deep"]
        table.add_row(
            f"8. backlog of {backlog['payments']}, {backlog['deep_leases']} dispatch leases "
            f"deep ({backlog['dispatch_lease_seconds']:.0f} s each)",
            SETUPS[setup],
            f"deep: {deep['payments']['per_second']:.1f} payments/s"
            f"\n{deep['messages_per_payment']:.3f} messages/payment",
            f"shallow: {shallow['payments']['per_second']:.1f} payments/s"
            f"\n{shallow['messages_per_payment']:.3f} messages/payment",
            _number(backlog["deep_to_shallow_drain"]),
            f">= {BACKLOG_DRAIN_TARGET} and\n<= {BACKLOG_MESSAGES_TARGET} messages",
            _verdict(met.get(f"backlog.{setup}")),
        )
    cpu = results.get("cpu", {}).get("postgres")
    if cpu and cpu.get("rounds"):
        rounds = cpu["rounds"]
        per = rounds[0].get("database_per_payment", {})
        table.add_row(
            "7. worker CPU per payment, zero-latency provider",
            cpu["worker"],
            f"{_number(cpu_per_payment(cpu))} ms steady (median)"
            f"\nrounds: {_numbers(r.get('worker_cpu_ms_per_payment_steady') for r in rounds)}"
            f"\nwhole runs: {_numbers(r['worker_cpu_ms_per_payment'] for r in rounds)}"
            "\ncontext switches/payment: "
            f"{_counts(r.get('worker_context_switches_per_payment_steady') for r in rounds)}"
            f"\n{_numbers(r['payments']['per_second'] for r in rounds)} payments/s"
            f"\n{per.get('transactions', 0):.1f} transactions, "
            f"{per.get('round_trips', 0):.1f} round trips/payment",
            "0 s sleeping task:\n"
            f"{_numbers(r.get('sleep_worker_cpu_ms_per_task') for r in rounds)} ms/task"
            + _reference_work([r.get("reference_work_ms") for r in rounds]),
            "-",
            f"<= {CPU_TARGET_MS:.1f} ms",
            _verdict(met.get("cpu.postgres")),
        )
    for variant, outage in results.get("outage", {}).items():
        _outage_rows(table, variant, outage, met)
    console.print(table)
    for note in notes(results):
        console.print(f"[yellow]note:[/] {note}")
    for title, error in results.get("errors", {}).items():
        console.print(f"[red]failed:[/] {title}: {error} (logs in bench/results/logs/)")
    info = results["machine"]
    console.print(
        f"{info['cpu_model']}, {info['cpus_usable']} CPUs usable, {info['memory_gib']} GiB, "
        f"Python {info['python']}; load average at start {info['load_average_at_start']}"
    )


def _outage_rows(table: Table, variant: str, outage: dict[str, Any], met: dict[str, bool]) -> None:
    """Scenario 9, one row per acceptance criterion of one variant."""
    title = (
        f"9. provider outage ({variant}), {outage['outage_seconds']:.0f} s at "
        f"{outage['rate']:g} payments/s"
    )
    calls, drain = outage["provider_calls"], outage["drain"]
    rows = (
        ("parked", f"{outage['parked']['max_seen']} parked of {outage['accepted']}", "-", "0"),
        (
            "succeeded",
            f"{outage['succeeded']} succeeded of {outage['accepted']}",
            "-",
            "all",
        ),
        (
            "charged_twice",
            f"{outage['charged_twice']} charged twice, {outage['not_charged']} succeeded uncharged",
            "-",
            "0 and 0",
        ),
        (
            "calls_within_probes",
            f"{calls['after_open']} calls after the circuit opened\n"
            f"({calls['during_outage']} during the outage, {calls['before_open']} before it "
            "opened)",
            f"probes allowed: {calls['probes_allowed']}",
            f"<= {calls['probes_allowed']}",
        ),
        (
            "drain",
            f"{drain['per_second']:.1f} payments/s after recovery\nrecovery -> last done "
            f"{_number(outage['recovery_to_last_done_seconds'])} s",
            f"pool (healthy): {outage['pool_per_second']:.1f} payments/s",
            f">= {outage_verdict.DRAIN_TARGET}",
        ),
        (
            "messages",
            f"{outage['messages_per_payment']:.3f} messages/payment",
            "-",
            f"<= {outage_verdict.MESSAGES_TARGET}",
        ),
    )
    for criterion, ours, baseline, target in rows:
        ratio = _number(drain.get("ratio")) if criterion == "drain" else "-"
        table.add_row(
            title,
            "PostgreSQL + RabbitMQ",
            ours,
            baseline,
            ratio,
            target,
            _verdict(met.get(f"outage.{variant}.{criterion}")),
        )
