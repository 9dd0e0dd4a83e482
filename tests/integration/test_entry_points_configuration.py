"""A process started without ``payorch`` (a supervisor naming our modules to uvicorn or
Celery) refuses a configuration as ``payorch`` does: with ``PAYORCH_ENV`` unset it exits 78
with the line naming the variable, no traceback and no secret; with it set, the same
entry point serves the API.

Real subprocesses, started the way such a supervisor would (``python -m uvicorn …``,
``python -m celery -A …``), in an environment without the caller's ``PAYORCH_*``."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestrator.settings_loading import EX_CONFIG
from tests.support.processes import (
    ProcessManager,
    free_port,
    process_environment,
    wait_for_http,
)

STRIPE_KEY = "sk_live_do_not_print_me_51Hx"
DATABASE_PASSWORD = "hunter2-do-not-print"
SECRET_KEY = "a-long-secret-that-must-never-be-printed-0123456789"
SECRETS = (STRIPE_KEY, DATABASE_PASSWORD, SECRET_KEY)
REPOSITORY = Path(__file__).resolve().parents[2]


def entry_points() -> dict[str, list[str]]:
    port = str(free_port())  # must not even be bound
    return {
        "uvicorn app": ["-m", "uvicorn", "orchestrator.api.asgi:app", "--port", port],
        "uvicorn factory": [
            "-m",
            "uvicorn",
            "--factory",
            "orchestrator.api.asgi:app_from_environment",
            "--port",
            port,
        ],
        "celery worker": ["-m", "celery", "-A", "workers.celery_app", "worker", "--pool=solo"],
    }


def _run_without_env(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = process_environment(
        {
            "PAYORCH_DATABASE_URL": (
                f"postgresql+psycopg://payorch:{DATABASE_PASSWORD}@127.0.0.1:1/payorch"
            ),
            "PAYORCH_STRIPE_API_KEY": STRIPE_KEY,
            "PAYORCH_SECRET_KEY": SECRET_KEY,
        }
    )
    assert "PAYORCH_ENV" not in env
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_uvicorn_and_celery_refuse_to_start_without_payorch_env_in_one_line() -> None:
    commands = entry_points()
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(commands, pool.map(_run_without_env, commands.values()), strict=True))

    failures = []
    for name, result in results.items():
        output = result.stdout + result.stderr
        problems = []
        if result.returncode != EX_CONFIG:
            problems.append(f"exit {result.returncode}, not {EX_CONFIG}")
        if "Traceback" in output:
            problems.append("a traceback")
        if any(secret in output for secret in SECRETS):
            problems.append("a secret")
        naming = [line for line in result.stderr.splitlines() if "PAYORCH_ENV" in line]
        if len(naming) != 1 or not naming[0].startswith("PAYORCH_ENV: not set"):
            problems.append("not one line saying PAYORCH_ENV is not set")
        if len(output.splitlines()) > 3:
            problems.append(f"{len(output.splitlines())} lines")
        if problems:
            failures.append(f"{name}: {', '.join(problems)}\n{output[-2000:]}")
    assert not failures, "\n\n".join(failures)


def test_uvicorn_serves_the_api_from_the_module_app_when_payorch_env_is_set(
    processes: ProcessManager, tmp_path: Path
) -> None:
    port = free_port()
    server = processes.start(
        [sys.executable, "-m", "uvicorn", "orchestrator.api.asgi:app", "--port", str(port)],
        name="uvicorn",
        env={"PAYORCH_ENV": "dev", "PAYORCH_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"},
        cwd=REPOSITORY,
    )
    answer = wait_for_http(f"http://127.0.0.1:{port}/healthz", process=server)
    assert answer.json() == {"status": "ok"}
