"""pip-audit over lock files, for CI (.ci/run) and `make audit`:

    .venv/bin/python -m tests.support.audit requirements-dev.lock [-- PIP_AUDIT_ARGS...]

Reads the pins from the hashed lock (`--disable-pip`: nothing is installed or resolved) and
asks pip-audit's vulnerability service (PyPI's JSON API by default) about each one.

* A known vulnerability: exit 1, with pip-audit's report.
* The service unreachable (a connection error or timeout), or answering for none of the
  packages (a mirror that serves the package index but not PyPI's per-version JSON answers
  404, which pip-audit reports as "not found on PyPI" and exits 0): a notice on stderr that
  says the audit was SKIPPED and why, exit 0.  Never silent: pip-audit alone would print a
  table of skipped packages and "No known vulnerabilities found".
* Some packages answered and some not: those audited count; the others are listed in a
  notice.
* Anything else pip-audit fails on (a malformed lock, a crash): exit 1 with its output.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# What pip-audit's output holds when it could not reach its service: requests' and urllib3's
# connection errors and timeouts, pip-audit's own connection error and its advice.
UNREACHABLE_MARKERS = (
    "ConnectionError",
    "ConnectTimeout",
    "ReadTimeout",
    "NameResolutionError",
    "VulnServiceConnectionError",
    "network may be blocking",
    # pip-audit's error for an answer it cannot use (a 5xx from the service).
    "ServiceError",
)
OUTPUT_LINES = 20


@dataclass(frozen=True)
class Verdict:
    exit_code: int
    message: str


def judge(returncode: int, report: str | None, output: str) -> Verdict:
    """The audit's outcome from pip-audit's exit code, its JSON report (None when it wrote
    none) and what it printed."""
    if not report:
        if any(marker in output for marker in UNREACHABLE_MARKERS):
            return Verdict(
                0,
                "pip-audit: SKIPPED, the vulnerability service is unreachable; "
                "no package was audited",
            )
        return Verdict(1, f"pip-audit failed (exit {returncode}) without a report")
    dependencies = json.loads(report)["dependencies"]
    vulnerable = [d for d in dependencies if d.get("vulns")]
    unaudited = [d for d in dependencies if "skip_reason" in d]
    if vulnerable:
        lines = [
            f"  {d['name']} {d['version']}: {' '.join([v['id'], *v.get('aliases', [])])} "
            f"(fixed in {', '.join(v['fix_versions']) or 'no release yet'})"
            for d in vulnerable
            for v in d["vulns"]
        ]
        return Verdict(
            1,
            f"pip-audit: {len(vulnerable)} locked package(s) have known vulnerabilities; "
            "raise the floor in pyproject.toml and run make lock LOCK_FLAGS='--upgrade-package "
            "NAME':\n" + "\n".join(lines),
        )
    if returncode != 0:
        return Verdict(1, f"pip-audit failed (exit {returncode}) with no vulnerability found")
    if dependencies and len(unaudited) == len(dependencies):
        return Verdict(
            0,
            f"pip-audit: SKIPPED, the vulnerability service answered for none of the "
            f"{len(dependencies)} locked packages ({unaudited[0]['skip_reason']})",
        )
    if unaudited:
        names = ", ".join(d["name"] for d in unaudited)
        return Verdict(
            0,
            f"pip-audit: no known vulnerability in {len(dependencies) - len(unaudited)} "
            f"packages; NOT audited (the service did not answer for them): {names}",
        )
    return Verdict(0, f"pip-audit: no known vulnerability in {len(dependencies)} packages")


def audit(locks: list[str], extra_args: list[str]) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="payorch-audit-") as tmp:
        report_path = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip_audit", "--disable-pip", "--progress-spinner=off"]
        command += ["--format=json", f"--output={report_path}"]
        for lock in locks:
            command += ["--requirement", lock]
        result = subprocess.run(
            [*command, *extra_args], capture_output=True, text=True, check=False
        )
        report = report_path.read_text() if report_path.exists() else None
    output = result.stdout + result.stderr
    verdict = judge(result.returncode, report, output)
    if verdict.exit_code != 0 or report is None:
        # The operator needs pip-audit's own words: why it failed or could not connect (the
        # last lines: a connection error's traceback is long).
        sys.stderr.write("\n".join(output.strip().splitlines()[-OUTPUT_LINES:]) + "\n")
    return verdict


def main(argv: list[str]) -> int:
    locks, extra_args = argv, []
    if "--" in argv:
        split = argv.index("--")
        locks, extra_args = argv[:split], argv[split + 1 :]
    if not locks:
        print("usage: python -m tests.support.audit LOCK... [-- PIP_AUDIT_ARGS...]")
        return 2
    verdict = audit(locks, extra_args)
    print(f"[audit] {verdict.message}", file=sys.stderr)
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
