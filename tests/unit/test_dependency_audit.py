"""CI's audit step (python -m tests.support.audit, .ci/run): real pip-audit processes against
a vulnerability service on loopback (OSV's query API, which pip-audit speaks with -s osv), so
the failing, passing and skipping paths all run without the network."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.audit import judge
from tests.support.dependency_locks import parse_lock

ROOT = Path(__file__).resolve().parents[2]

JINJA2_ADVISORY = {
    "id": "GHSA-cpwx-vrp4-4pq7",
    "aliases": ["CVE-2025-27516"],
    "summary": "Jinja2 vulnerable to sandbox breakout through attr filter selecting format method",
    "affected": [
        {
            "package": {"name": "jinja2", "ecosystem": "PyPI"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.1.6"}]}],
        }
    ],
}


class FakeOsv:
    """OSV's POST /v1/query on loopback: jinja2 3.1.5 has the advisory above, nothing else
    has any.  Records every (name, version) asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                name, version = query["package"]["name"], query["version"]
                fake.asked.append((name, version))
                vulnerable = (name, version) == ("jinja2", "3.1.5")
                body = json.dumps({"vulns": [JINJA2_ADVISORY]} if vulnerable else {}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/query"


@pytest.fixture
def osv() -> Iterator[FakeOsv]:
    fake = FakeOsv()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()
    thread.join()


def _audit(lock: Path, url: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The step as .ci/run runs it, pointed at a given OSV address."""
    pip_audit_args = ["-s", "osv", "--osv-url", url, "--timeout", "10", "--cache-dir", str(cache)]
    return subprocess.run(
        [sys.executable, "-m", "tests.support.audit", str(lock), "--", *pip_audit_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _lock_with(tmp_path: Path, *pins: str) -> Path:
    lock = tmp_path / "requirements.lock"
    lock.write_text("".join(f"{pin} \\\n    --hash=sha256:{'0' * 64}\n" for pin in pins))
    return lock


def test_ci_runs_the_audit_over_the_dev_lock() -> None:
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make audit$", ci_run, re.M)
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^audit: .*\n\t(.*)$", makefile, re.M)
    assert recipe is not None
    assert recipe.group(1) == "$(BIN)/python -m tests.support.audit requirements-dev.lock"


def test_a_locked_version_with_a_known_vulnerability_fails_the_step(
    osv: FakeOsv, tmp_path: Path
) -> None:
    lock = _lock_with(tmp_path, "jinja2==3.1.5", "markupsafe==3.0.2")
    result = _audit(lock, osv.url, tmp_path / "cache")
    assert result.returncode == 1, result.stderr
    # pip-audit names the advisory by its CVE alias first.
    assert "jinja2 3.1.5: CVE-2025-27516 GHSA-cpwx-vrp4-4pq7 (fixed in 3.1.6)" in result.stderr
    assert sorted(osv.asked) == [("jinja2", "3.1.5"), ("markupsafe", "3.0.2")]


def test_the_dev_lock_is_audited_package_by_package(osv: FakeOsv, tmp_path: Path) -> None:
    lock = ROOT / "requirements-dev.lock"
    result = _audit(lock, osv.url, tmp_path / "cache")
    pins = parse_lock(lock.read_text())
    assert result.returncode == 0, result.stderr
    assert f"no known vulnerability in {len(pins)} packages" in result.stderr
    assert {name for name, _ in osv.asked} == set(pins)


def test_an_unreachable_service_skips_the_step_with_a_notice(tmp_path: Path) -> None:
    # A port nothing listens on: bound, then closed, so the connection is refused.
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/query"
    server.server_close()
    result = _audit(_lock_with(tmp_path, "jinja2==3.1.5"), url, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "SKIPPED, the vulnerability service is unreachable" in result.stderr
    assert "Connection refused" in result.stderr  # pip-audit's own words come along


# The verdict on pip-audit's report, for what the loopback service cannot show.

# What pip-audit wrote on this machine, whose package index answers 404 on PyPI's
# per-version JSON (/pypi/NAME/VERSION/json): every package "not found", exit 0.
ALL_NOT_FOUND = {
    "dependencies": [
        {
            "name": "adyen",
            "skip_reason": "Dependency not found on PyPI and could not be audited: adyen (16.0.0)",
        },
        {
            "name": "alembic",
            "skip_reason": "Dependency not found on PyPI and could not be audited: alembic "
            "(1.20.1)",
        },
    ],
    "fixes": [],
}


def test_a_service_answering_for_no_package_is_a_skip_never_a_pass() -> None:
    verdict = judge(0, json.dumps(ALL_NOT_FOUND), "No known vulnerabilities found")
    assert verdict.exit_code == 0
    assert verdict.message.startswith(
        "pip-audit: SKIPPED, the vulnerability service answered for none of the 2 locked"
    )


def test_packages_the_service_did_not_answer_for_are_named() -> None:
    report = {
        "dependencies": [
            {"name": "alembic", "version": "1.20.1", "vulns": []},
            ALL_NOT_FOUND["dependencies"][0],
        ]
    }
    verdict = judge(0, json.dumps(report), "")
    assert verdict.exit_code == 0
    assert verdict.message == (
        "pip-audit: no known vulnerability in 1 packages; NOT audited (the service did not "
        "answer for them): adyen"
    )


def test_a_failure_that_is_not_the_network_fails_the_step() -> None:
    verdict = judge(1, None, "ERROR: requirements.lock: invalid requirement")
    assert verdict.exit_code == 1
