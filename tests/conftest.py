"""Top-level test configuration: only registers the fixture plugins.

    tests.support.plugin     real services (PostgreSQL, RabbitMQ) and real processes
    tests.harness.fixtures   database_url: an SQLite file or a PostgreSQL test database

The plugin's service fixtures are lazy: unit and replay tests never start, install or even
probe PostgreSQL or RabbitMQ.  Markers (postgres, broker, chaos) are declared in pyproject.toml.
"""

pytest_plugins = ["tests.support.plugin", "tests.harness.fixtures"]
