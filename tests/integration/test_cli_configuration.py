"""Every ``payorch`` command refuses bad configuration the same way: one short message
naming the variable, exit status 78, no traceback, and never a secret.

The commands are not listed by hand: they are read from the CLI itself, so a command
added later is covered (or must be exempted here, with a reason) without anyone
remembering this test.  Each runs as a real subprocess with a broken configuration that
also carries known secrets: pydantic's default error text would repeat them
(``input_value={... 'sk_live_...'}``).
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import typer.main

from orchestrator.cli.config import EX_CONFIG
from orchestrator.cli.main import app
from tests.support.processes import free_port, payorch_command, process_environment

STRIPE_KEY = "sk_live_do_not_print_me_51Hx"
DATABASE_PASSWORD = "hunter2-do-not-print"
SECRET_KEY = "a-long-secret-that-must-never-be-printed-0123456789"
SECRETS = (STRIPE_KEY, DATABASE_PASSWORD, SECRET_KEY)

# Commands that read no PAYORCH_ configuration, and why.
NEEDS_NO_CONFIGURATION = {
    "demo": "builds its own embedded configuration (SQLite, in-process broker, simulator)",
    "bench": "builds its own configuration for the database and broker it creates",
    "provider-sim": "the simulator takes flags only",
}

BROKEN = {
    # The provider timeout must fit in the lease: a model-level error, whose pydantic text
    # would otherwise carry the whole input, secrets included.
    # No PAYORCH_ENV at all: no process guesses dev (or production) for it.
    "env_unset": {"PAYORCH_SECRET_KEY": SECRET_KEY},
    "provider_timeout": {
        "PAYORCH_ENV": "test",
        "PAYORCH_PROVIDER_TIMEOUT_SECONDS": "100",
        "PAYORCH_SECRET_KEY": SECRET_KEY,
    },
    # A field error on a value beside the secrets.
    "lease": {
        "PAYORCH_ENV": "test",
        "PAYORCH_LEASE_SECONDS": "-5",
        "PAYORCH_SECRET_KEY": SECRET_KEY,
    },
    # Production with the simulator's provider: refused, naming the variable.
    "production_simulator": {
        "PAYORCH_ENV": "production",
        "PAYORCH_SECRET_KEY": SECRET_KEY,
        "PAYORCH_STRIPE_API_BASE": "http://127.0.0.1:12111",
    },
}
EXPECTED_VARIABLE = {
    "env_unset": "PAYORCH_ENV: not set",
    "provider_timeout": "PAYORCH_PROVIDER_TIMEOUT_SECONDS",
    "lease": "PAYORCH_LEASE_SECONDS",
    "production_simulator": "PAYORCH_STRIPE_API_BASE",
}


def _leaf_commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    # Duck-typed: typer builds its commands on its own copy of click's classes.
    if hasattr(command, "commands"):
        found = []
        for name, sub in sorted(command.commands.items()):
            found.extend(_leaf_commands(sub, (*path, name)))
        return found
    return [(path, command)]


def _invocation(path: tuple[str, ...], command: Any) -> list[str]:
    """The command with a plausible value for every required argument and option."""
    args = list(path)
    for param in command.params:
        if not param.required:
            continue
        if param.param_type_name == "argument":
            args.append("pay_" + "0" * 32)
        else:
            args.extend([param.opts[0], "from the configuration test"])
    if path == ("api",):
        args.extend(["--port", str(free_port())])  # must not even bind it
    return args


def all_commands() -> list[list[str]]:
    root = typer.main.get_command(app)
    return [
        _invocation(path, command)
        for path, command in _leaf_commands(root)
        if path[0] not in NEEDS_NO_CONFIGURATION
    ]


def test_the_command_list_is_read_from_the_cli() -> None:
    names = {" ".join(c[:2]) if c[0] in {"db", "clients"} else c[0] for c in all_commands()}
    # A sample that must be there (the test would be vacuous on an empty list).
    assert {"db upgrade", "clients create", "clients list", "api", "worker"} <= names
    assert not names & set(NEEDS_NO_CONFIGURATION)


def _run(args: list[str], broken: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = process_environment(
        {
            "PAYORCH_DATABASE_URL": (
                f"postgresql+psycopg://payorch:{DATABASE_PASSWORD}@127.0.0.1:1/payorch"
            ),
            "PAYORCH_STRIPE_API_KEY": STRIPE_KEY,
            "PAYORCH_OPERATOR": "config-test",
            **broken,
        }
    )
    return subprocess.run(
        payorch_command(*args),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _commands_for(case: str) -> list[list[str]]:
    # Every command for the model-level error (the one whose default text carries every
    # input); two commands for the others, which take the same path (the processes are
    # slow to start on a shared machine).
    if case in ("provider_timeout", "env_unset"):
        return all_commands()
    return [["db", "upgrade"], ["worker"]]


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_every_command_refuses_bad_configuration_in_one_line_without_secrets(case: str) -> None:
    commands = _commands_for(case)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda args: _run(args, BROKEN[case]), commands))

    failures = []
    for args, result in zip(commands, results, strict=True):
        output = result.stdout + result.stderr
        problems = []
        if result.returncode != EX_CONFIG:
            problems.append(f"exit {result.returncode}, not {EX_CONFIG}")
        if "Traceback" in output:
            problems.append("a traceback")
        if any(secret in output for secret in SECRETS):
            problems.append("a secret")
        if EXPECTED_VARIABLE[case] not in result.stderr:
            problems.append(f"no mention of {EXPECTED_VARIABLE[case]}")
        if "Value error" in output:
            problems.append("pydantic's 'Value error' prefix")
        if len(output.splitlines()) > 3:
            problems.append(f"{len(output.splitlines())} lines")
        if problems:
            failures.append(f"payorch {' '.join(args)}: {', '.join(problems)}\n{output[-2000:]}")
    assert not failures, "\n\n".join(failures)
