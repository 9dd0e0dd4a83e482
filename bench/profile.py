"""py-spy profiles of a measured process, when ``BENCH_PROFILE_DIR`` is set (and py-spy is
installed: ``.venv/bin/pip install py-spy``; not a dependency of the project).

``record(pid, name)`` starts ``py-spy record`` on the process (and, with ``--subprocesses``,
its pool children) in the background and returns a handle to stop it; the profile is written
as collapsed stacks (``NAME.txt``, one line per stack with its sample count, the input of
flamegraph tools and of ``summarize``: ``python -m bench.profile NAME.txt``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

DIRECTORY_ENV = "BENCH_PROFILE_DIR"


class Recording:
    def __init__(self, processes: list[subprocess.Popen[bytes]]) -> None:
        self._processes = processes

    def stop(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for process in self._processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _py_spy() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


def record(pid: int, name: str) -> Recording:
    directory = os.environ.get(DIRECTORY_ENV)
    tool = _py_spy()
    if not directory or tool is None:
        return Recording([])
    Path(directory).mkdir(parents=True, exist_ok=True)
    # --nonblocking: read the process's memory without stopping it; stopping 128 threads
    # 97 times a second slowed a worker so much that its tasks ran out of time budget.
    # --gil: only the thread holding the GIL, i.e. the Python CPU time (a threads worker's
    # waiting threads would otherwise fill the profile).
    command = [tool, "record", "--pid", str(pid), "--rate", "97", "--subprocesses"]
    command += ["--nonblocking", "--gil"]
    command += ["--format", "raw", "--output", str(Path(directory) / f"{name}.txt")]
    # One sampler per process (a second would double the overhead); the collapsed stacks
    # make a flame graph with any flamegraph tool.
    started = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    return Recording(started)


def summarize(collapsed: Path, top: int = 25) -> list[tuple[str, float]]:
    """Share of samples per package (the first frame of each stack that names one), from
    a collapsed-stacks file: where the CPU goes, coarsely."""
    shares: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        total += count
        frames = stack.split(";")
        shares[_package(frames)] += count
    return (
        [(name, round(100 * n / total, 1)) for name, n in shares.most_common(top)] if total else []
    )


def _package(frames: list[str]) -> str:
    """The innermost frame's top-level module: a frame reads ``function (path:line)``, the
    path relative to its import root (``sqlalchemy/engine/base.py``, ``threading.py``)."""
    frame = frames[-1] if frames else "?"
    if "(" not in frame:
        return frame[:40]
    path = frame.rsplit("(", 1)[1].split(":", 1)[0]
    top = path.split("/", 1)[0]
    return top.removesuffix(".py")


if __name__ == "__main__":
    for package, share in summarize(
        Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25
    ):
        print(f"{share:5.1f} %  {package}")
