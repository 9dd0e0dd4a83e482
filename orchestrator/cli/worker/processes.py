"""``payorch worker`` as several processes: one threads pool per usable CPU, one command.

Why: a threads pool runs every payment in one interpreter, so all of them share one core
(the GIL); at a real provider's latency the default worker kept one core nearly busy while
the machine's other core sat mostly idle.  The same 128 threads as two processes of 64
drained a backlog clearly faster on two CPUs; four processes on two CPUs were slower again
(the benchmark, ``payorch bench`` and docs/performance.md, measures this).  Prefork is no
answer: it runs one payment per process, a whole interpreter's memory each.

The process that runs ``payorch worker`` forks the worker processes and supervises them:

* **before anything connects.**  It forks after the settings are checked and the Celery app
  is built, with no database, broker or provider connection open and no thread started;
  each worker process opens its own (its database pool sized by ``pool``).
* **signals.**  SIGTERM is passed on as SIGTERM (Celery's warm shutdown: the tasks running
  end, nothing new starts).  SIGINT is passed on as SIGTERM the first time and SIGQUIT (cold
  shutdown) the second, which is Celery's own Ctrl+C-twice rule; a terminal's Ctrl+C also
  reaches every process of the group directly, which that rule makes harmless.  SIGQUIT is
  passed on as SIGQUIT.  SIGHUP stops the command like SIGTERM.  The worker processes
  block SIGHUP: Celery's answer to it (outside a terminal) is to re-execute the command
  line, which in a worker process would start a second supervisor and its own processes.
* **one exits, all stop.**  When a worker process exits on its own (a crash, the OOM
  killer), the supervisor stops the others (warm) and exits non-zero, and the process
  manager restarts the command (compose: ``restart: unless-stopped``).  It does not restart
  children itself: a half-sized worker that looks healthy, or a child crashing in a loop
  inside a parent that looks alive, hides the fault from whoever is on call.  The dead
  process's leases expire and are taken over like those of any crashed worker.
* **it dies, they die.**  If the supervisor is killed (SIGKILL), the kernel sends SIGKILL to
  its worker processes (``PR_SET_PDEATHSIG``): no orphan keeps taking tasks unsupervised.
  Losing them at once is safe by the protocol: every lease they held expires and is taken
  over, and the provider calls they had sent are queried before anything is retried.
* **one process group.**  Everything stays in the group of the command, so what reaches
  the group reaches all of it: SIGKILL (a crash), SIGSTOP (a frozen machine), SIGCONT.

The supervisor runs no task, holds no lease and writes nothing, so there is nothing in it
to fence.  It serves the worker's ``--metrics-port`` (Prometheus multiprocess mode, the
sum over its worker processes).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

from orchestrator.logging import get_logger

log = get_logger("payorch.worker")

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, e.g. a container's cpuset), not the
    machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_processes(pool: str) -> int:
    """One threads pool per usable CPU where the kernel can tie the children's lives to the
    supervisor's (Linux); one process otherwise, and for the other pools (prefork already
    runs a process per task; solo runs one task)."""
    if pool != "threads" or not sys.platform.startswith("linux"):
        return 1
    return usable_cpus()


def split_concurrency(concurrency: int, processes: int) -> tuple[int, ...]:
    """``concurrency`` tasks at once shared among at most ``processes`` processes, as evenly
    as possible (never a process with no thread)."""
    if concurrency < 1 or processes < 1:
        raise ValueError("concurrency and processes must be at least 1")
    count = min(processes, concurrency)
    base, extra = divmod(concurrency, count)
    return tuple(base + (1 if index < extra else 0) for index in range(count))


@dataclass
class _Supervisor:
    children: dict[int, int] = field(default_factory=dict)  # pid -> index
    stopping: bool = False
    interrupted: bool = False

    def forward(self, sig: int, _frame: FrameType | None = None) -> None:
        if sig == signal.SIGQUIT or (sig == signal.SIGINT and self.interrupted):
            passed = signal.SIGQUIT
        else:
            passed = signal.SIGTERM
        self.interrupted = self.interrupted or sig == signal.SIGINT
        self.stopping = True
        self.signal_children(passed)

    def signal_children(self, sig: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):  # exited; waitpid reaps it
                os.kill(pid, sig)


def run_forked(
    shares: Sequence[int],
    run: Callable[[int, int], None],
    *,
    on_child_exit: Callable[[int], None] | None = None,
    while_supervising: Callable[[], None] | None = None,
) -> int:
    """Fork one process per share; each calls ``run(index, share)`` and exits (it never
    returns from here).  This process supervises them (see the module docstring) and
    returns the command's exit status once all have exited.

    ``while_supervising`` runs in the supervisor after the fork (start threads there, never
    before: a fork copies no thread but every lock they held); ``on_child_exit(pid)`` runs
    for each child reaped."""
    supervisor = _Supervisor()
    parent = os.getpid()
    # A shutdown signal that arrived between two forks would find no handler yet (or,
    # in a child, the supervisor's): hold them until each side has its own.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    mine: tuple[int, int] | None = None
    try:
        for index, share in enumerate(shares):
            pid = os.fork()
            if pid == 0:
                mine = (index, share)
                break
            supervisor.children[pid] = index
        if mine is None:
            for sig in FORWARDED:
                signal.signal(sig, supervisor.forward)
    finally:
        # Only the supervisor restores its mask: a worker process keeps SIGHUP blocked to
        # its end (_become_child), including while it unwinds from here.
        if mine is None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    if mine is not None:
        _become_child(parent, previous_mask)
        run(*mine)
        raise SystemExit(0)
    log.info(
        "worker_supervisor_started",
        processes=len(shares),
        threads=list(shares),
        pids=sorted(supervisor.children),
    )
    if while_supervising is not None:
        while_supervising()
    return _supervise(supervisor, on_child_exit)


def _become_child(parent: int, mask: set[int | signal.Signals]) -> None:
    _die_with(parent)
    # Blocked before any thread starts, so no thread of this process ever takes it.
    signal.pthread_sigmask(signal.SIG_SETMASK, {*mask, signal.SIGHUP})


def _die_with(parent: int) -> None:
    """SIGKILL this process when the supervisor dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # The supervisor may have died before the prctl: then nobody would kill us.
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def _supervise(supervisor: _Supervisor, on_child_exit: Callable[[int], None] | None) -> int:
    status = 0
    while supervisor.children:
        pid, wait_status = os.waitpid(-1, 0)
        index = supervisor.children.pop(pid, None)
        if index is None:
            continue  # not one of ours (the supervisor starts no other process)
        code = _exit_status(wait_status)
        if on_child_exit is not None:
            on_child_exit(pid)
        if not supervisor.stopping:
            # A worker process died on its own: stop the rest and let the process manager
            # restart the whole command (module docstring).
            log.error(
                "worker_process_exited",
                pid=pid,
                process=index,
                exit_status=code,
                action="stopping the other worker processes (warm shutdown); restart the command",
            )
            supervisor.stopping = True
            supervisor.signal_children(signal.SIGTERM)
            status = code or 1
        elif code != 0 and status == 0:
            status = code
    return status


def _exit_status(wait_status: int) -> int:
    """A shell's exit status: the child's code, or 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code
