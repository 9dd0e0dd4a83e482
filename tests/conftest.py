"""Top-level test configuration: only registers the fixture plugins.

    tests.support.plugin     real services (PostgreSQL, RabbitMQ) and real processes
    tests.harness.fixtures   database_url: an SQLite file or a PostgreSQL test database

The plugin's service fixtures are lazy: unit and replay tests never start, install or even
probe PostgreSQL or RabbitMQ.  Markers (postgres, broker, chaos) are declared in pyproject.toml.
"""

import sys
from pathlib import Path

# `tests.*` must be importable however pytest is launched (`pytest` from any directory, not
# only `python -m pytest` from the root).  Equivalent to `pythonpath = ["."]` in pytest's
# configuration; this runs before pytest imports the plugin below.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest_plugins = ["tests.support.plugin", "tests.harness.fixtures"]
