"""PostgreSQL for the tests: 127.0.0.1:5432, user ``postgres``, trust authentication.

``ensure_postgres`` decides what to do from what it finds::

    protocol probe ok ......................... nothing
    refused / starting up, cluster exists ..... pg_ctlcluster start, wait until ready
    no cluster, server binaries installed ..... pg_createcluster, start
    not installed ............................. apt-get install postgresql, start,
                                                trust auth for 127.0.0.1 (fresh cluster only)
    password required ......................... trust auth when allowed, else a clear error

Every connection made here is short-lived: the suite runs an API server and several workers
against a server with ``max_connections = 100``, so the helpers never hold one.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from tests.support.locking import SERVICE_LOCK
from tests.support.system import (
    TEST_RESOURCE_PREFIX,
    Ensured,
    apt_install,
    belongs_to_dead_run,
    is_test_resource,
    new_resource_name,
    run,
    run_detached,
    which,
)

HOST = "127.0.0.1"
PORT = 5432
USER = "postgres"
ADMIN_DATABASE = "postgres"
TRUST_MARKER = "# payorch tests: trust TCP connections from 127.0.0.1"

# How long a start may take before we call it failed.  Too short: a crash-recovery after a
# `stop -m immediate` (or a slow disk) is reported as a failure; too long: a broken cluster
# keeps the session waiting.
READY_TIMEOUT_SECONDS = 90.0

ProbeKind = Literal["ok", "refused", "starting", "auth", "error"]


class PostgresUnavailable(RuntimeError):
    """PostgreSQL could not be made reachable; the message says what was tried."""


@dataclass(frozen=True)
class Probe:
    kind: ProbeKind
    detail: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


@dataclass(frozen=True)
class Cluster:
    version: str
    name: str
    port: int
    online: bool
    config_root: Path = Path("/etc/postgresql")

    @property
    def config_dir(self) -> Path:
        return self.config_root / self.version / self.name


def database_url(database: str) -> str:
    return f"postgresql+psycopg://{USER}@{HOST}:{PORT}/{database}"


def _connect(database: str = ADMIN_DATABASE, timeout: float = 5.0) -> psycopg.Connection[TupleRow]:
    return psycopg.connect(
        host=HOST,
        port=PORT,
        user=USER,
        dbname=database,
        connect_timeout=max(1, round(timeout)),
        autocommit=True,
        application_name="payorch-tests",
    )


def port_open(host: str = HOST, port: int = PORT, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def probe_postgres(timeout: float = 3.0) -> Probe:
    """TCP connect, then a real login and ``SELECT 1``: an open port alone proves little."""
    if not port_open(timeout=timeout):
        return Probe("refused", f"nothing accepts TCP connections on {HOST}:{PORT}")
    try:
        with _connect(timeout=timeout) as connection:
            connection.execute("SELECT 1").fetchone()
    except psycopg.OperationalError as exc:
        message = str(exc)
        lowered = message.lower()
        if "starting up" in lowered or "shutting down" in lowered or "recovery" in lowered:
            return Probe("starting", message)
        if "password" in lowered or "pg_hba.conf" in lowered or "authentication" in lowered:
            return Probe("auth", message)
        if "refused" in lowered:
            return Probe("refused", message)
        return Probe("error", message)
    return Probe("ok", f"PostgreSQL answers on {HOST}:{PORT}")


def find_cluster(port: int = PORT) -> Cluster | None:
    """The Debian cluster configured for ``port`` (pg_lsclusters), if there is one."""
    if which("pg_lsclusters") is None:
        return None
    listing = run(["pg_lsclusters", "--no-header"], timeout=30).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == str(port):
            return Cluster(fields[0], fields[1], port, fields[3].startswith("online"))
    return None


def installed_versions() -> list[str]:
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return []
    versions = [p.name for p in root.iterdir() if (p / "bin" / "postgres").exists()]
    return sorted(versions, key=lambda v: [int(part) for part in v.split(".") if part.isdigit()])


def installed() -> bool:
    return which("pg_ctlcluster") is not None and bool(installed_versions())


def _pg_ctlcluster(cluster: Cluster, *action: str) -> None:
    # --skip-systemctl-redirect: there is no systemd here, and pg_ctlcluster would otherwise
    # hand the request to systemctl.  run_detached: the postmaster must not inherit a pipe.
    run_detached(
        ["pg_ctlcluster", "--skip-systemctl-redirect", cluster.version, cluster.name, *action],
        timeout=READY_TIMEOUT_SECONDS,
    )


def wait_until_ready(timeout: float = READY_TIMEOUT_SECONDS) -> Probe:
    deadline = time.monotonic() + timeout
    probe = probe_postgres()
    while not probe.ok and probe.kind != "auth" and time.monotonic() < deadline:
        time.sleep(0.25)
        probe = probe_postgres()
    return probe


def configure_trust_auth(cluster: Cluster) -> bool:
    """Put a trust rule for 127.0.0.1 first in pg_hba.conf (first match wins).  Idempotent."""
    hba = cluster.config_dir / "pg_hba.conf"
    text = hba.read_text()
    if TRUST_MARKER in text:
        return False
    hba.write_text(f"{TRUST_MARKER}\nhost    all    all    127.0.0.1/32    trust\n\n{text}")
    _pg_ctlcluster(cluster, "reload")
    return True


def ensure_postgres(*, configure_auth: bool = False, allow_install: bool = True) -> Ensured:
    """Make 127.0.0.1:5432 answer as user postgres without a password; say what was done.

    ``configure_auth`` allows editing pg_hba.conf of an existing cluster (CI passes it); a
    cluster this function created or installed is always configured, because a fresh Debian
    cluster asks for a password on TCP.
    """
    ensured = Ensured("PostgreSQL")
    probe = probe_postgres()
    if probe.ok:
        return ensured
    with SERVICE_LOCK.held():
        probe = probe_postgres()  # another session may have fixed it while we waited
        if probe.ok:
            return ensured
        fresh = False
        if not installed():
            if not allow_install:
                raise PostgresUnavailable(f"PostgreSQL is not installed ({probe.detail})")
            apt_install(["postgresql"])
            ensured.did("installed the Debian package postgresql")
            fresh = True
        cluster = find_cluster()
        if cluster is None:
            versions = installed_versions()
            if not versions:
                raise PostgresUnavailable("PostgreSQL server binaries not found after install")
            run(["pg_createcluster", "--port", str(PORT), versions[-1], "main"], timeout=300)
            ensured.did(f"created cluster {versions[-1]}/main on port {PORT}")
            cluster = find_cluster()
            fresh = True
            if cluster is None:
                raise PostgresUnavailable("pg_createcluster did not register a cluster")
        if fresh:
            probe = probe_postgres()  # the package's maintainer script may have started it
        if probe.kind == "refused" and cluster.online:
            # Online but not listening: still opening its sockets, or configured elsewhere.
            probe = wait_until_ready(timeout=15)
            if probe.kind == "refused":
                raise PostgresUnavailable(
                    f"cluster {cluster.version}/{cluster.name} is online but {probe.detail}; "
                    f"check listen_addresses in {cluster.config_dir / 'postgresql.conf'}"
                )
        if probe.kind in ("refused", "starting"):
            if probe.kind == "refused":
                _pg_ctlcluster(cluster, "start")
                ensured.did(f"started cluster {cluster.version}/{cluster.name} (it was stopped)")
            probe = wait_until_ready()
        if probe.kind == "auth":
            if not (fresh or configure_auth):
                raise PostgresUnavailable(
                    f"PostgreSQL on {HOST}:{PORT} refused user {USER} without a password "
                    f"({probe.detail.strip()}). Add 'host all all 127.0.0.1/32 trust' at the "
                    f"top of {cluster.config_dir / 'pg_hba.conf'} and reload, or run "
                    "'python -m tests.support.services --ensure --configure-auth'."
                )
            if configure_trust_auth(cluster):
                ensured.did(f"added trust auth for 127.0.0.1 to {cluster.config_dir}/pg_hba.conf")
            probe = wait_until_ready()
        if not probe.ok:
            raise PostgresUnavailable(
                f"PostgreSQL {cluster.version}/{cluster.name} is not usable: {probe.detail}"
            )
    return ensured


def create_database(name: str | None = None) -> str:
    """Create an empty database and return its SQLAlchemy URL."""
    name = name or new_resource_name()
    if not is_test_resource(name):
        raise ValueError(f"test database names look like {TEST_RESOURCE_PREFIX}<pid>_<suffix>")
    with _connect() as connection:
        # template0: template1 may be in use by another session, which makes CREATE fail.
        connection.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(
                sql.Identifier(name)
            )
        )
    return database_url(name)


def drop_database(name: str) -> None:
    """Drop a database even while a leftover worker is still connected to it."""
    with _connect() as connection:
        version = connection.info.server_version
        if version >= 130000:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            return
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def reap_stale_databases() -> list[str]:
    """Drop databases of earlier runs that died before their teardown (SIGKILL, power loss)."""
    with _connect() as connection:
        names = [
            row[0]
            for row in connection.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                (TEST_RESOURCE_PREFIX.replace("_", r"\_") + "%",),
            )
        ]
    stale = [name for name in names if belongs_to_dead_run(name)]
    for name in stale:
        with contextlib.suppress(psycopg.Error):
            drop_database(name)
    return stale


@contextlib.contextmanager
def connection_to(url_or_database: str) -> Iterator[psycopg.Connection[TupleRow]]:
    """A short-lived autocommit connection to a test database (by name or URL)."""
    database = url_or_database.rsplit("/", 1)[-1]
    with _connect(database) as connection:
        yield connection
