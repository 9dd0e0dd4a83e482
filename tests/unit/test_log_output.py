"""Log lines arrive whole when several processes and threads share one stream (issue 17).

Real forked processes write real records, through the same structlog logger factory and
``logging`` handler the long-running processes use, into a regular file and into a pipe
that a slow reader drains; every line read back must be exactly one JSON object.  With
structlog's ``PrintLogger`` (a record and its newline in two writes) the file test finds
records run together on one line; without the cross-process lock the pipe test finds
long records cut into each other.
"""

from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytest
import structlog

from orchestrator.log_output import LineHandler, LineLoggerFactory, LineWriter

PROCESSES = 4


def _like_stderr(fd: int) -> TextIO:
    """A text stream on ``fd`` built the way CPython builds ``sys.stderr``: unbuffered
    bytes underneath, every ``write`` passed straight through."""
    return io.TextIOWrapper(io.FileIO(fd, "w"), encoding="utf-8", write_through=True)


def _structlog_logger(stream: TextIO) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.wrap_logger(
        LineLoggerFactory(stream)(),
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )
    return logger


def _stdlib_logger(stream: TextIO, name: str) -> logging.Logger:
    handler = LineHandler(stream)
    handler.setFormatter(logging.Formatter('{"event": "%(message)s", "logger": "%(name)s"}'))
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def _in_forked_children(work: Callable[[int], None]) -> None:
    """Run ``work(child_number)`` in PROCESSES forked children at once; fail if one fails."""
    children = []
    for number in range(PROCESSES):
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            status = 0
            try:
                work(number)
            except BaseException:  # reported through the exit status
                status = 1
            os._exit(status)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def _json_objects(lines: list[str]) -> list[dict[str, object]]:
    """Every line as exactly one JSON object (json.loads refuses '{...}{...}')."""
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)
    return records


def test_records_of_forked_processes_never_share_a_line_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.log"
    per_child = 1500
    with _like_stderr(os.open(path, os.O_WRONLY | os.O_CREAT)) as stream:
        events = _structlog_logger(stream)
        library = _stdlib_logger(stream, "test.library")

        def work(number: int) -> None:
            for n in range(per_child):
                events.info("claim_skipped", payment_id=f"pay_{number}_{n}", carried_token=1)
                if n % 10 == 0:
                    library.info("library line %d from %d", n, number)

        _in_forked_children(work)

    records = _json_objects(path.read_text().splitlines())
    claims = [r for r in records if r["event"] == "claim_skipped"]
    assert len(claims) == PROCESSES * per_child
    assert len(records) - len(claims) == PROCESSES * per_child // 10


def test_records_longer_than_pipe_buf_arrive_whole_through_a_full_pipe() -> None:
    """A record longer than PIPE_BUF (a traceback) into a pipe that is full: the kernel
    writes it in pieces as the reader drains, so only the lock keeps writers apart."""
    read_fd, write_fd = os.pipe()
    assert os.fpathconf(write_fd, "PC_PIPE_BUF") < 20_000
    per_child = 60
    with _like_stderr(write_fd) as stream, os.fdopen(read_fd) as reader:
        events = _structlog_logger(stream)
        lines: list[str] = []

        def drain_slowly() -> None:
            for line in reader:
                lines.append(line)
                time.sleep(0.001)  # a log shipper that keeps the pipe full

        drainer = threading.Thread(target=drain_slowly, daemon=True)
        drainer.start()

        def work(number: int) -> None:
            for n in range(per_child):
                events.error("task_failed", n=n, child=number, exception="x" * 20_000)

        _in_forked_children(work)
        stream.close()  # the reader sees the end once every copy of the write end is closed
        drainer.join(timeout=60)
        assert not drainer.is_alive()

    records = _json_objects(lines)
    assert len(records) == PROCESSES * per_child
    assert all(len(str(r["exception"])) == 20_000 for r in records)


def test_a_line_logged_while_this_thread_is_mid_write_is_written_whole(tmp_path: Path) -> None:
    """A signal handler (Celery's shutdown notice) runs in the thread it interrupts, which
    may hold the writer's lock: the nested call must neither deadlock nor split a line."""
    path = tmp_path / "nested.log"
    with path.open("w") as stream:
        writer = LineWriter(stream)
        with writer._thread_lock:  # what an interrupted write_line holds
            writer.write_line('{"event": "worker: Warm shutdown (MainProcess)"}')
        writer.write_line('{"event": "after"}')

    assert [r["event"] for r in _json_objects(path.read_text().splitlines())] == [
        "worker: Warm shutdown (MainProcess)",
        "after",
    ]


def test_a_child_forked_while_another_thread_was_writing_can_still_log(tmp_path: Path) -> None:
    """Celery forks its pool from a process with threads: a thread lock held at the fork
    would stay held forever in the child, and its first log line would hang."""
    path = tmp_path / "fork.log"
    with path.open("w") as stream:
        writer = LineWriter(stream)
        holding, release = threading.Event(), threading.Event()

        def hold_the_lock() -> None:
            with writer._thread_lock:
                holding.set()
                release.wait(timeout=30)

        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        assert holding.wait(timeout=10)
        try:
            pid = os.fork()
            if pid == 0:
                writer.write_line('{"event": "from the child"}')
                os._exit(0)
            deadline = time.monotonic() + 20
            while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
                time.sleep(0.01)
            if done == (0, 0):
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            assert done != (0, 0), "the child hung on the lock it inherited"
        finally:
            release.set()
            holder.join()

    assert _json_objects(path.read_text().splitlines()) == [{"event": "from the child"}]


def test_records_longer_than_pipe_buf_from_forked_processes_arrive_whole_in_a_file(
    tmp_path: Path,
) -> None:
    """A regular file takes no lock (one write lands whole there, however long): long
    records from several processes sharing the descriptor still never mix."""
    path = tmp_path / "long.log"
    per_child = 150
    with _like_stderr(os.open(path, os.O_WRONLY | os.O_CREAT)) as stream:
        events = _structlog_logger(stream)

        def work(number: int) -> None:
            for n in range(per_child):
                events.error("task_failed", n=n, child=number, exception="x" * 20_000)

        _in_forked_children(work)

    records = _json_objects(path.read_text().splitlines())
    assert len(records) == PROCESSES * per_child
    assert all(len(str(r["exception"])) == 20_000 for r in records)


def test_the_cross_process_lock_is_taken_on_a_pipe_and_not_on_a_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked: list[tuple[int, int]] = []
    real_lockf = fcntl.lockf

    def recording_lockf(fd: int, operation: int, *args: int) -> Any:
        locked.append((fd, operation))
        return real_lockf(fd, operation, *args)

    monkeypatch.setattr(fcntl, "lockf", recording_lockf)

    with (tmp_path / "plain.log").open("w") as file_stream:
        LineWriter(file_stream).write_line('{"event": "to a file"}')
    assert locked == []

    read_fd, write_fd = os.pipe()
    with _like_stderr(write_fd) as pipe_stream, os.fdopen(read_fd) as reader:
        LineWriter(pipe_stream).write_line('{"event": "to a pipe"}')
        pipe_stream.close()
        assert reader.read() == '{"event": "to a pipe"}\n'
    assert [operation for _, operation in locked] == [fcntl.LOCK_EX, fcntl.LOCK_UN]
