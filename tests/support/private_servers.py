"""PostgreSQL and RabbitMQ servers that belong to one test session, for outage tests.

Outage tests stop a server on purpose.  Stopping the machine's shared PostgreSQL or
RabbitMQ would be an outage for every other session (and every developer) on the machine,
so these tests get servers of their own instead, started here and stopped here:

* ``PrivatePostgres``: a cluster made with ``initdb`` in a temporary directory, run with
  ``pg_ctl`` on a free port, its Unix socket in that directory too.  ``initdb`` refuses to
  run as root, so as root the cluster belongs to the ``postgres`` system user.
* ``PrivateRabbitMQ``: a RabbitMQ node with its own node name, AMQP and distribution ports,
  data and log directories, configuration file (no plugins), and Erlang cookie (``HOME``).
  The tools are called from RabbitMQ's own directory, not through Debian's wrapper in
  /usr/sbin, which would switch to the ``rabbitmq`` user and its cookie.

Nothing here touches 127.0.0.1:5432 or :5672.  Every server records its owner's pid in its
directory under ``ROOT``; ``reap_dead_sessions`` stops the servers of a session that died
without its teardown (SIGKILL), since nothing else would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import amqp
import psycopg
from psycopg import sql

from tests.support.system import CommandError, new_resource_name, run, run_detached, which

ROOT = Path(tempfile.gettempdir()) / "payorch-test-servers"
OWNER_FILE = "owner.pid"
HOST = "127.0.0.1"

# Under contention (2 cores shared by several sessions) initdb + start takes ~2-5 s, a
# RabbitMQ first boot 5-30 s.  Too short: a slow machine fails the outage tests for no
# reason; too long: a broken installation keeps the session waiting that long.
POSTGRES_START_SECONDS = 90.0
RABBITMQ_START_SECONDS = 180.0
STOP_SECONDS = 60.0


class PrivateServerError(RuntimeError):
    """A private server could not be made, started or stopped; says what was tried."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _new_directory(kind: str) -> Path:
    ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=ROOT))
    directory.chmod(0o755)
    (directory / OWNER_FILE).write_text(str(os.getpid()))
    return directory


# PostgreSQL ---------------------------------------------------------------------------------


def postgres_bin_dir() -> Path | None:
    """The newest installed server's binaries (Debian keeps them out of PATH)."""
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: [int(part) for part in p.name.split(".") if part.isdigit()],
        )
        if versions:
            return versions[-1] / "bin"
    initdb = which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """One PostgreSQL cluster in a temporary directory, on a free port, trust auth."""

    def __init__(self) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise PrivateServerError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.bin_dir = bin_dir
        self.directory = _new_directory("postgres")
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = free_port()
        self.user = "postgres"
        # initdb refuses root: as root, the cluster belongs to the postgres system user.
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.directory, user="postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._initialised = False

    def _tool(self, name: str, *args: str) -> list[str]:
        return [*self._as, str(self.bin_dir / name), *args]

    def start(self) -> None:
        if not self._initialised:
            run(
                self._tool(
                    "initdb", "-D", str(self.data), "-U", self.user, "-A", "trust",
                    "-E", "UTF8", "--no-sync",
                ),
                timeout=POSTGRES_START_SECONDS,
            )  # fmt: skip
            self._initialised = True
        options = (
            f"-p {self.port} -c listen_addresses={HOST} -k {self.directory} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        # run_detached: the postmaster must not inherit (and hold open) a pipe of ours.
        run_detached(
            self._tool(
                "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                "-t", str(int(POSTGRES_START_SECONDS)), "-o", options,
            ),
            timeout=POSTGRES_START_SECONDS + 10,
        )  # fmt: skip
        self.wait_until_ready()

    def stop(self, mode: str = "fast") -> None:
        """``fast``: sessions are disconnected, a clean shutdown; ``immediate``: a crash."""
        if not (self.data / "postmaster.pid").exists():
            return
        run(
            self._tool("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w",
                       "-t", str(int(STOP_SECONDS))),
            timeout=STOP_SECONDS + 10,
        )  # fmt: skip
        deadline = time.monotonic() + STOP_SECONDS
        while _port_open(self.port):
            if time.monotonic() > deadline:
                raise PrivateServerError(f"private PostgreSQL still up on port {self.port}")
            time.sleep(0.1)

    def is_ready(self) -> bool:
        try:
            with self._connect(timeout=2) as connection:
                connection.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def wait_until_ready(self, timeout: float = POSTGRES_START_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise PrivateServerError(
                    f"private PostgreSQL on port {self.port} not ready after {timeout:.0f}s; "
                    f"log: {self.log}"
                )
            time.sleep(0.2)

    def _connect(self, database: str = "postgres", timeout: int = 5) -> psycopg.Connection:  # type: ignore[type-arg]
        return psycopg.connect(
            host=HOST,
            port=self.port,
            user=self.user,
            dbname=database,
            connect_timeout=timeout,
            autocommit=True,
            application_name="payorch-tests",
        )

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@{HOST}:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its SQLAlchemy URL."""
        name = new_resource_name()
        with self._connect() as connection:
            connection.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
                    sql.Identifier(name)
                )
            )
        return self.url(name)

    def destroy(self) -> None:
        """Stop the cluster (immediately: its data is thrown away) and remove it."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# RabbitMQ -----------------------------------------------------------------------------------


def rabbitmq_bin_dir() -> Path | None:
    """RabbitMQ's own scripts (``/usr/sbin/rabbitmq-server`` is a symlink to a wrapper in
    the same directory that switches to the ``rabbitmq`` user: we call the real ones)."""
    server = which("rabbitmq-server")
    if server is None:
        return None
    directory = Path(server).resolve().parent
    return directory if (directory / "rabbitmqctl").exists() else None


class PrivateRabbitMQ:
    """One RabbitMQ node of our own: own name, ports, data, logs, config and cookie."""

    user = "guest"
    password = "guest"

    def __init__(self) -> None:
        bin_dir = rabbitmq_bin_dir()
        if bin_dir is None:
            raise PrivateServerError("RabbitMQ (rabbitmq-server, rabbitmqctl) not found")
        self.bin_dir = bin_dir
        self.directory = _new_directory("rabbitmq")
        self.node = f"{new_resource_name()}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.log = self.directory / "server.log"
        self.pid_file = self.directory / "node.pid"
        home = self.directory / "home"
        home.mkdir()
        config = self.directory / "rabbitmq.conf"
        config.write_text(f"listeners.tcp.default = {HOST}:{self.port}\n")
        (self.directory / "enabled_plugins").write_text("[].\n")
        (self.directory / "rabbitmq-env.conf").write_text("")
        self._env = {
            # The Erlang cookie lives in $HOME: ours, so rabbitmqctl talks to our node only.
            "HOME": str(home),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.directory / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.directory / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "ERL_EPMD_ADDRESS": HOST,
        }
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, vhost: str) -> str:
        return f"amqp://{self.user}:{self.password}@{HOST}:{self.port}/{vhost}"

    def ctl(self, *args: str, timeout: float = 60.0, check: bool = True) -> str:
        result = run(
            [str(self.bin_dir / "rabbitmqctl"), "-n", self.node, *args],
            timeout=timeout,
            check=check,
            env=self._env,
        )
        return result.stdout

    # -- the node -------------------------------------------------------------------------

    def node_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Boot the node (or, when only the application was stopped, start it)."""
        if self.node_running():
            self.ctl("start_app", timeout=RABBITMQ_START_SECONDS)
        else:
            with self.log.open("ab") as log:
                self._process = subprocess.Popen(
                    [str(self.bin_dir / "rabbitmq-server")],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self._env},
                    start_new_session=True,  # a Ctrl-C on pytest does not reach the node
                )
        self.wait_until_ready()

    def stop(self, mode: str = "app") -> None:
        """``app``: stop_app (listeners close, the VM stays); ``node``: the VM goes too."""
        if not self.node_running():
            return
        if mode == "app":
            self.ctl("stop_app", timeout=STOP_SECONDS)
        else:
            self.ctl("shutdown", timeout=STOP_SECONDS)
            assert self._process is not None
            self._process.wait(timeout=STOP_SECONDS)
        deadline = time.monotonic() + STOP_SECONDS
        while _port_open(self.port):
            if time.monotonic() > deadline:
                raise PrivateServerError(f"private RabbitMQ still up on port {self.port}")
            time.sleep(0.1)

    def is_ready(self, vhost: str = "/") -> bool:
        if not _port_open(self.port):
            return False
        try:
            connection = amqp.Connection(
                f"{HOST}:{self.port}",
                userid=self.user,
                password=self.password,
                virtual_host=vhost,
                connect_timeout=3,
            )
            connection.connect()
            connection.close()
        except Exception:
            return False
        return True

    def wait_until_ready(self, timeout: float = RABBITMQ_START_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if self._process is not None and self._process.poll() is not None:
                raise PrivateServerError(
                    f"private RabbitMQ node {self.node} exited with {self._process.returncode}; "
                    f"log: {self.log}"
                )
            if time.monotonic() > deadline:
                raise PrivateServerError(
                    f"private RabbitMQ {self.node} not ready after {timeout:.0f}s; log: {self.log}"
                )
            time.sleep(0.25)

    def create_vhost(self) -> str:
        name = new_resource_name()
        self.ctl("add_vhost", name)
        self.ctl("set_permissions", "-p", name, self.user, ".*", ".*", ".*")
        return name

    def destroy(self) -> None:
        """Shut the node down (killing it if it will not go) and remove its directory."""
        try:
            if self.node_running():
                with contextlib.suppress(CommandError):
                    self.ctl("shutdown", timeout=STOP_SECONDS)
                assert self._process is not None
                try:
                    self._process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(self._process.pid, signal.SIGKILL)
                    self._process.wait()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# Leftovers of sessions that died ------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_dead_sessions(root: Path = ROOT) -> list[str]:
    """Stop and remove the private servers of test sessions that are gone (by owner pid).

    Only directories under ``root`` with an owner file are considered, and only processes
    those directories name (the postmaster's pid file, the RabbitMQ node's pid file) are
    signalled: nothing else on the machine is touched.  A live sibling (another xdist worker
    of the same run, or another run) is spared: its owner pid is alive.
    """
    reaped: list[str] = []
    if not root.is_dir():
        return reaped
    for directory in root.iterdir():
        owner_file = directory / OWNER_FILE
        try:
            owner = int(owner_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        for pid_file in (directory / "data" / "postmaster.pid", directory / "node.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)
        reaped.append(directory.name)
    return reaped
