"""The worker process's container, built lazily after the pool forked.

A SQLAlchemy engine must not cross a fork (two processes on one socket corrupt the
protocol), so each pool child builds its own on first use.
"""

from __future__ import annotations

import os

from orchestrator.bootstrap import Container, bootstrap

_container: Container | None = None
_container_pid: int | None = None


def container() -> Container:
    global _container, _container_pid
    if _container is None or _container_pid != os.getpid():
        _container = bootstrap()
        _container_pid = os.getpid()
    return _container


def install(prebuilt: Container) -> None:
    """Use an already built container (the embedded demo runs workers in-process)."""
    global _container, _container_pid
    _container = prebuilt
    _container_pid = os.getpid()
