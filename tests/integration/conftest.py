"""Integration tests run against the real PostgreSQL and RabbitMQ on 127.0.0.1.

The service fixtures live in ``tests/support/plugin.py`` (registered by tests/conftest.py) so
that tests/chaos can use them too:

    postgres_url, make_postgres_database, broker_url, broker_vhost,
    service_control, processes, session_processes

A test that requests a service fixture is marked ``postgres`` / ``broker`` automatically, and
the services are started (or installed) once per session before the first such test.
"""
