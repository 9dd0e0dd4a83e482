"""``payorch demo``: the embedded default, end to end, with a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator.cli.devtools_import import import_devtools


def demo(
    payments: Annotated[int, typer.Option(min=1, help="Logical payments to send.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed of the traffic and of the faults.")] = 42,
    workers: Annotated[int, typer.Option(min=1, help="Worker threads.")] = 8,
    timeout_rate: Annotated[
        float, typer.Option(min=0, max=1, help="Confirms that time out after charging.")
    ] = 0.05,
    saved_500_rate: Annotated[
        float, typer.Option(min=0, max=1, help="Confirms that charge, then answer a saved 500.")
    ] = 0.03,
    rate_limit_rate: Annotated[
        float, typer.Option(min=0, max=1, help="Creates and confirms answered 429.")
    ] = 0.03,
    decline_rate: Annotated[
        float, typer.Option(min=0, max=1, help="Payments made with a declining card.")
    ] = 0.10,
    crash: Annotated[
        bool, typer.Option(help="Crash a worker once, right after the provider charged.")
    ] = True,
    directory: Annotated[
        Path | None, typer.Option(help="Keep the SQLite database here (default: a temp dir).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Run everything on this machine with no servers (SQLite, in-process broker and
    workers, the provider simulators, the API on a free port), send a storm of duplicate
    and concurrent payments with provider faults and a worker crash, then payments routed
    across both providers with soft declines forced at the first, and check that every
    payment moved money at most once, at one provider, and reached a final state.  Exit
    status 1 if not."""
    runner = import_devtools("devtools.demo.runner", command="demo")
    console = Console()
    report = runner.run_demo(
        runner.DemoOptions(
            payments=payments,
            seed=seed,
            workers=workers,
            timeout_rate=timeout_rate,
            saved_500_rate=saved_500_rate,
            rate_limit_rate=rate_limit_rate,
            decline_rate=decline_rate,
            crash=crash,
            directory=directory,
        ),
        console=Console(stderr=True),
    )
    if as_json:
        print(runner.report_json(report))
    else:
        console.print(report.table())
        console.print(report.providers_table())
        for violation in report.violations:
            console.print(f"[red]invariant violated:[/] {violation}")
        console.print(
            "[green]every payment final, none charged twice or at two providers, "
            "every event delivered signed[/]"
            if report.ok
            else "[red]FAILED[/]"
        )
    if not report.ok:
        raise typer.Exit(1)
