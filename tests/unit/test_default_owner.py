"""The owner name a run writes on the leases it takes: this host and this process, and a
forked child's own pid (the name is cached per process)."""

from __future__ import annotations

import os
import socket

import pytest

from orchestrator.engine.runner import default_owner


def test_names_this_host_and_process() -> None:
    assert default_owner() == f"{socket.gethostname()}:{os.getpid()}"
    assert default_owner() is default_owner()  # computed once


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_names_its_own_pid() -> None:
    parent = default_owner()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its name and leave without running pytest's teardown
        os.close(read)
        os.write(write, default_owner().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        child = answer.read().decode()
    os.waitpid(pid, 0)
    assert child == f"{socket.gethostname()}:{pid}"
    assert child != parent
