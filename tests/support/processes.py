"""Real subprocesses for acceptance and chaos tests: the API, workers, the sweeper, the simulator.

Each process runs in its own session (``start_new_session=True``), so it leads a process group
that also holds its children (Celery's pool processes, uvicorn's reloader-free server), and a
signal can reach the whole group.  Its stdout and stderr go to a log file, never to a pipe: a
pipe nobody reads fills up and blocks a chatty worker mid-payment.

    stop()    SIGTERM to the leader (a graceful shutdown; the program stops its own children),
              SIGKILL to the whole group after the grace period, then to any straggler
    kill()    SIGKILL now: a crash (group=True: the leader and its children)
    pause()   SIGSTOP to the group: a hung process that still holds its connections and leases
    resume()  SIGCONT

``ProcessManager`` (the ``processes`` fixture) stops everything it started when the test ends,
pass or fail, and prints the tail of each log when the test failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import httpx

# The CLI entry point, called the way the console script calls it, but always under the
# interpreter running the tests: no dependency on where the script was installed, or on a
# `__main__` guard in orchestrator/cli/main.py.
_PAYORCH_SHIM = (
    "import sys; sys.argv[0] = 'payorch'; from orchestrator.cli.main import main; sys.exit(main())"
)

DEFAULT_GRACE_SECONDS = 10.0


class ProcessExited(RuntimeError):
    """A process we were waiting on died first; the message carries its output."""


def payorch_command(*args: str) -> list[str]:
    """``payorch ARGS...`` as an argv list, e.g. ``payorch_command("api", "--port", "8000")``."""
    return [sys.executable, "-c", _PAYORCH_SHIM, *args]


def process_environment(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The inherited environment without the caller's own ``PAYORCH_*`` settings.

    Hazard: a developer's exported PAYORCH_DATABASE_URL would otherwise point a test's worker
    at their real database.  Output is unbuffered so the log shows what happened before a kill.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PAYORCH_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides or {})
    return env


class ManagedProcess:
    def __init__(
        self, name: str, args: Sequence[str], log_path: Path, popen: subprocess.Popen[bytes]
    ) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self._popen = popen

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited {self.returncode}"
        return f"<ManagedProcess {self.name} pid={self.pid} {state}>"

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal) once the leader has exited."""
        if self._popen.returncode is not None:
            return self._popen.returncode
        return self._peek_status()

    @property
    def running(self) -> bool:
        return self.returncode is None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the leader to exit on its own; TimeoutError if it does not."""
        if not self._wait_exited(timeout):
            raise TimeoutError(f"{self.name} (pid {self.pid}) still running after {timeout}s")
        status = self.returncode
        assert status is not None
        return status

    def send_signal(self, sig: int, *, group: bool = False) -> None:
        """Signal the leader, or the whole group.  A no-op once the process has been reaped."""
        if self._popen.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        """Ask for a graceful shutdown without waiting (see ``stop``)."""
        self.send_signal(signal.SIGTERM)
        # A paused (SIGSTOPped) process would never act on the SIGTERM.
        self.send_signal(signal.SIGCONT, group=True)

    def stop(self, grace: float = DEFAULT_GRACE_SECONDS) -> int:
        """SIGTERM, then SIGKILL to the whole group after ``grace`` seconds; the exit status."""
        self.terminate()
        return self.finish(time.monotonic() + grace)

    def finish(self, deadline: float) -> int:
        """Wait until ``deadline`` for the leader to exit, then kill and reap what is left."""
        if not self._wait_exited(max(0.0, deadline - time.monotonic())):
            self.send_signal(signal.SIGKILL, group=True)
        return self.reap()

    def kill(self, *, group: bool = True) -> int:
        """SIGKILL now: a crash; the exit status.

        ``group=False`` kills only the leader and leaves its children running (orphaned pool
        processes, as after an OOM kill of the parent); ``reap()`` or the fixture ends them.
        """
        if group:
            self.send_signal(signal.SIGKILL, group=True)
            return self.reap()
        self.send_signal(signal.SIGKILL)
        if not self._wait_exited(10.0):
            raise TimeoutError(f"{self.name} (pid {self.pid}) survived SIGKILL for 10s")
        status = self.returncode
        assert status is not None
        return status

    def reap(self) -> int:
        """Kill whatever is left of the group and collect the leader's exit status.

        The leader is reaped last: until then its zombie keeps the pid, and with it the
        process-group id, from being reused, so the group signal cannot hit a stranger.
        """
        if self._popen.returncode is None:
            self.send_signal(signal.SIGKILL, group=True)
        return self._popen.wait()

    def pause(self) -> None:
        """SIGSTOP the group: the process hangs but keeps its sockets, connections and leases."""
        self.send_signal(signal.SIGSTOP, group=True)

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT, group=True)

    def output(self) -> str:
        """Everything the process wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def _peek_status(self) -> int | None:
        """The leader's exit status without reaping it (WNOWAIT); None while it runs."""
        try:
            result = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped behind our back (SIGCHLD ignored): status unknown
            return self._popen.wait()
        if result is None or result.si_pid == 0:
            return None
        if result.si_code == os.CLD_EXITED:
            return result.si_status
        return -result.si_status

    def _wait_exited(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


def start_process(
    args: Sequence[str],
    *,
    log_dir: Path,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start ``args`` in a new session with output in ``log_dir/<name>.log``.

    ``env`` adds to ``process_environment()`` (the inherited environment minus PAYORCH_*).
    The caller owns the process; prefer the ``processes`` fixture, which cleans up.
    """
    name = name or Path(args[0]).name
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = _unique_path(log_dir, name)
    with log_path.open("wb") as log_file:  # the child keeps its own copy of the descriptor
        popen = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=process_environment(env),
            cwd=cwd or log_dir,
            start_new_session=True,
        )
    return ManagedProcess(name, args, log_path, popen)


def _unique_path(directory: Path, name: str) -> Path:
    candidate = directory / f"{name}.log"
    counter = 2
    while candidate.exists():
        candidate = directory / f"{name}-{counter}.log"
        counter += 1
    return candidate


class ProcessManager:
    """Starts processes for one test (or one session) and stops every one of them at the end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[ManagedProcess] = []

    def start(
        self,
        args: Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        process = start_process(args, log_dir=self.log_dir, name=name, env=env, cwd=cwd)
        self.started.append(process)
        return process

    def payorch(
        self, *args: str, name: str | None = None, env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        """Start ``payorch ARGS...``, e.g. ``processes.payorch("worker", "--concurrency", "2")``."""
        return self.start(
            payorch_command(*args), name=name or f"payorch-{args[0] if args else 'cli'}", env=env
        )

    def stop_all(self, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        """Stop everything still running; the grace period is shared, not per process."""
        alive = [process for process in self.started if process.running]
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + grace
        for process in alive:
            process.finish(deadline)
        for process in self.started:
            process.reap()  # also ends children orphaned by kill(group=False)

    def describe(self, lines: int = 60) -> str:
        """The tail of every log, for a failed test's report."""
        return "\n\n".join(
            f"----- {p.name} (pid {p.pid}, exit {p.returncode}) {p.log_path} -----\n{p.tail(lines)}"
            for p in self.started
        )


def process_group(leader: int) -> set[int]:
    """The pids of every live process in ``leader``'s process group (from /proc)."""
    members = {leader}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(leader):
            members.add(int(stat.parent.name))
    return members


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (another process may still take it: bind soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _check_alive(processes: Iterable[ManagedProcess], waiting_for: str) -> None:
    for process in processes:
        if process.poll() is not None:
            raise ProcessExited(
                f"{process.name} (pid {process.pid}) exited with {process.returncode} while "
                f"waiting for {waiting_for}; its output:\n{process.tail()}"
            )


def _as_list(process: ManagedProcess | Iterable[ManagedProcess] | None) -> list[ManagedProcess]:
    if process is None:
        return []
    if isinstance(process, ManagedProcess):
        return [process]
    return list(process)


def wait_for_port(
    host: str,
    port: int,
    timeout: float = 30.0,
    *,
    process: ManagedProcess | Iterable[ManagedProcess] | None = None,
) -> None:
    """Wait until ``host:port`` accepts TCP connections; fail fast if ``process`` dies."""
    watched = _as_list(process)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            pass
        _check_alive(watched, f"{host}:{port}")
        if time.monotonic() > deadline:
            tails = "".join(f"\n{p.name} output:\n{p.tail()}" for p in watched)
            raise TimeoutError(f"{host}:{port} not accepting connections after {timeout}s{tails}")
        time.sleep(0.05)


def wait_for_http(
    url: str,
    timeout: float = 30.0,
    *,
    status: int | None = 200,
    process: ManagedProcess | Iterable[ManagedProcess] | None = None,
) -> httpx.Response:
    """Wait until GET ``url`` answers ``status`` (None: any HTTP answer); return the response.

    Fails fast with the process output if ``process`` dies while we wait.
    """
    watched = _as_list(process)
    deadline = time.monotonic() + timeout
    last = "no answer"
    # trust_env=False: an HTTP(S)_PROXY in the environment must not intercept 127.0.0.1.
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            try:
                response = client.get(url)
            except httpx.HTTPError as exc:
                last = repr(exc)
            else:
                if status is None or response.status_code == status:
                    return response
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            _check_alive(watched, url)
            if time.monotonic() > deadline:
                tails = "".join(f"\n{p.name} output:\n{p.tail()}" for p in watched)
                raise TimeoutError(f"GET {url} not ready after {timeout}s ({last}){tails}")
            time.sleep(0.1)
