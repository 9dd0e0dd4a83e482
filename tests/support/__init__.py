"""Test infrastructure: real PostgreSQL and RabbitMQ on this machine, and real subprocesses.

system.py     run a command, find a tool, install Debian packages
locking.py    one machine-wide lock so concurrent test sessions never start, stop or
              install a service at the same time
postgres.py   probe / start / stop / install PostgreSQL; create and drop databases
rabbitmq.py   probe / start / stop / install RabbitMQ; create and delete vhosts
services.py   ensure both are up (also ``python -m tests.support.services --ensure``),
              and ``ServiceControl`` for outage tests (on the private servers only)
private_servers.py  a PostgreSQL cluster and a RabbitMQ node of the session's own, on free
              ports in temporary directories: the only servers outage tests stop
processes.py  start project processes with captured logs, stop / kill / pause them
plugin.py     the pytest fixtures (registered by tests/conftest.py)
"""
