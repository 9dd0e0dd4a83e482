"""The embedded default as a process of its own, for the bench to drive from outside
(``python -m bench.embedded --directory D --workers N [--noops M]``).

It runs the demo's stack unchanged (``devtools.demo.embedded.EmbeddedStack``: SQLite,
Celery's in-memory transport, a thread-pool worker, the sweeper, the simulator and the API
in this one process), without the demo's faults and crash, plus the bench's no-op task.
It writes ``D/ready.json`` (API URL, merchant key, database path) once it serves; with
``--noops M`` it then publishes M no-op tasks to its in-memory broker.  SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench.noop import NOOP_TASK, install


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embedded")
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--noops", type=int, default=0)
    args = parser.parse_args(argv)

    install()
    from devtools.demo.embedded import EmbeddedOptions, EmbeddedStack

    stop = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    options = EmbeddedOptions(
        directory=args.directory, workers=args.workers, faults=(), crash_after_confirms=None
    )
    with EmbeddedStack(options) as stack:
        assert stack.container is not None and stack.container.celery_app is not None
        app = stack.container.celery_app
        ready = {
            "api_url": stack.api_url,
            "merchant_key": stack.merchant_key,
            "database": str(stack.database_path),
        }
        (args.directory / "ready.json").write_text(json.dumps(ready))
        for n in range(args.noops):
            app.send_task(NOOP_TASK, args=[f"pay_{n:032x}", 1], retry=False)
        stop.wait()


if __name__ == "__main__":
    main()
