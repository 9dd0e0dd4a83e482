"""A window of 100,000 provider objects reconciles in bounded memory (decision 0093): the real
engine on PostgreSQL and the real Adyen source, reading a settlement report whose 100,000
rows are made as the source reads them (httpx's function-backed transport, a streamed body).

Each measurement is a process of its own (``reconcile_memory_probe``), its peak resident
memory read at its end: a run over 100,000 objects, and a process that reconciles a small
report and then holds 100,000 objects (what a run that loads its window whole would hold;
the same code, ``list()`` instead of a stream).  A run over 2,000 objects is the baseline
both are measured from.  A streamed run grows by a page; a loading one by the window.  The
bound leaves a wide margin both ways: a quarter of what holding the window adds."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tests.integration.reconcile_memory_probe import WARM_UP
from tests.support.processes import process_environment

OBJECTS = 100_000


def probe(mode: str, n: int, database_url: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.reconcile_memory_probe",
            mode,
            str(n),
            database_url,
        ],
        capture_output=True,
        text=True,
        env=process_environment(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_window_of_100000_provider_objects_reconciles_in_bounded_memory(
    make_postgres_database: Callable[[], str],
) -> None:
    database_url = make_postgres_database()

    baseline = probe("run", WARM_UP, database_url)
    held = probe("hold", OBJECTS, database_url)
    run = probe("run", OBJECTS, database_url)

    assert (run["status"], run["payments_seen"], run["foreign"]) == (
        "completed",
        OBJECTS,
        OBJECTS,
    )
    assert held["held"] == OBJECTS
    holding = held["peak_kib"] - baseline["peak_kib"]
    growth = run["peak_kib"] - baseline["peak_kib"]
    # Holding the window must cost something measurable, or the comparison says nothing.
    assert holding > 10_000, f"holding {OBJECTS} objects added only {holding} KiB"
    assert growth < holding / 4, f"the run grew {growth} KiB; holding the window: {holding} KiB"
