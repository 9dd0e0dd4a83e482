"""``payorch worker`` with the no-op task added (``python -m bench.worker --concurrency N``).

The command is the real one (``orchestrator.cli.main``, the same Celery app, settings and
worker arguments); ``bench.noop.install`` only adds ``bench.noop`` to the app it builds, so
payments and no-ops run on one identical setup.  ``bench.dbcount`` counts its transactions
and database round trips (event listeners; nothing else changes).
"""

from __future__ import annotations

import sys

from bench import dbcount
from bench.noop import install


def main() -> None:
    install()
    dbcount.install()
    from orchestrator.cli.main import app

    sys.argv[0] = "payorch"
    app(["worker", *sys.argv[1:]])


if __name__ == "__main__":
    main()
