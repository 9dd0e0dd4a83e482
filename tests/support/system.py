"""Running system commands for the service helpers: the tools, their output, apt."""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("payorch.tests.services")

# Databases and vhosts made by a test run are named payorch_test_<pid>_<random>, so a later run
# can tell the leftovers of a run that died (SIGKILL, power loss) from those of a live one.
TEST_RESOURCE_PREFIX = "payorch_test_"
_TEST_RESOURCE = re.compile(rf"^{TEST_RESOURCE_PREFIX}(\d+)_[0-9a-z_]+$")

# Service tools live in sbin, which a non-login shell (or a CI runner) may leave out of PATH.
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class CommandError(RuntimeError):
    """A system command failed; the message carries its output."""


def search_path() -> str:
    entries = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join([*entries, *(p for p in SYSTEM_PATH if p not in entries)])


def which(tool: str) -> str | None:
    return shutil.which(tool, path=search_path())


def run(
    args: Sequence[str],
    *,
    timeout: float = 120.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a short-lived command and return its output.

    Hazard: a command that daemonizes (``rabbitmq-server -detached``, ``pg_ctl start``) can
    leave the daemon holding our stdout pipe, so ``communicate()`` would wait for the daemon
    to exit.  Use ``run_detached`` for those.
    """
    environment = {**os.environ, "PATH": search_path(), **(env or {})}
    log.debug("running %s", " ".join(args))
    try:
        result = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{' '.join(args)} did not finish within {timeout:.0f}s") from exc
    if check and result.returncode != 0:
        raise CommandError(
            f"{' '.join(args)} exited with {result.returncode}\n"
            f"stdout: {result.stdout.strip()}\nstderr: {result.stderr.strip()}"
        )
    return result


def run_detached(
    args: Sequence[str], *, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run a command that starts a daemon, without giving the daemon a pipe to hold.

    Output goes to an unlinked temporary file and is read back when the command returns.  The
    command gets its own session, so a Ctrl-C on the test run never reaches the daemon.
    """
    environment = {**os.environ, "PATH": search_path()}
    log.debug("running %s", " ".join(args))
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            process.wait()
            raise CommandError(f"{' '.join(args)} did not finish within {timeout:.0f}s") from exc
        output.seek(0)
        text = output.read().decode(errors="replace")
    if returncode != 0:
        raise CommandError(f"{' '.join(args)} exited with {returncode}\noutput: {text.strip()}")
    return subprocess.CompletedProcess(list(args), returncode, text, "")


def apt_install(packages: Sequence[str]) -> None:
    """Install Debian packages non-interactively (the machine runs as root; no Docker)."""
    if which("apt-get") is None:
        raise CommandError(f"cannot install {', '.join(packages)}: apt-get is not available")
    if os.geteuid() != 0:
        raise CommandError(f"cannot install {', '.join(packages)}: not running as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    log.warning("installing Debian packages: %s (this takes a minute)", " ".join(packages))
    # A fresh machine may have empty package lists; refresh them once before installing.
    run(["apt-get", "update"], timeout=600, env=env)
    run(
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        timeout=1800,
        env=env,
    )


@dataclass
class Ensured:
    """What an ``ensure_*`` call found and did, for the log and the pytest summary."""

    service: str
    actions: list[str] = field(default_factory=list)

    def did(self, action: str) -> None:
        log.warning("%s: %s", self.service, action)
        self.actions.append(action)

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    def summary(self) -> str:
        return f"{self.service}: {'; '.join(self.actions) or 'already running'}"


def new_resource_name() -> str:
    return f"{TEST_RESOURCE_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"


def is_test_resource(name: str) -> bool:
    return _TEST_RESOURCE.match(name) is not None


def belongs_to_dead_run(name: str) -> bool:
    """True for a test database or vhost whose test run (by pid) no longer exists."""
    match = _TEST_RESOURCE.match(name)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
