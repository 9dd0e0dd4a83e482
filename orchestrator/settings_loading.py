"""Settings for a process that is starting, or a refusal: one line per problem naming the
environment variable, exit status ``EX_CONFIG`` (78), no traceback.

Every way a payorch process can start goes through here: ``payorch``'s commands
(``orchestrator.cli.config``), and the entry points a supervisor may name without
``payorch``: uvicorn's ``orchestrator.api.asgi:app`` and Celery's ``-A workers.celery_app``.
Hazard: an entry point that built ``Settings`` on its own would answer a missing
``PAYORCH_ENV`` with pydantic's traceback, where an operator looks for one line (in a
container log it may be the only thing they read).

pydantic's default error text repeats the input (the Stripe key, the database password).
``Settings`` hides inputs in its errors (``hide_input_in_errors``) and this module never
asks for them (``include_input=False``), so neither layer alone is trusted.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from pydantic import ValidationError

from orchestrator.settings import Settings
from orchestrator.validation_messages import error_message

EX_CONFIG = 78  # sysexits.h; the table of every exit status is orchestrator/cli/exit_codes.py

# What to do about a required variable that is not set, by field.
_WHEN_UNSET = {
    "env": (
        "not set: set it to production (servers), test (automated tests against the "
        "simulator) or dev (a developer's machine: placeholder secrets, local webhook "
        "targets); nothing runs without an explicit choice"
    ),
}


def describe_configuration_error(error: ValidationError) -> str:
    """One line per problem, naming the environment variable; never the input values."""
    lines = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        location = "".join(str(part) for part in item["loc"][:1])
        message = error_message(item)
        if item["type"] == "missing":
            message = _WHEN_UNSET.get(location, "not set")
        lines.append(f"PAYORCH_{location.upper()}: {message}" if location else message)
    return "\n".join(lines)


def refusal(error: ValidationError) -> str:
    """What a process refusing this configuration prints on stderr."""
    return f"payorch: invalid configuration:\n{describe_configuration_error(error)}"


def settings_or_exit() -> Settings:
    """Settings from the environment, or the refusal on stderr and exit status 78.

    For entry points outside ``payorch``'s commands (which exit through typer instead)."""
    try:
        return Settings()
    except ValidationError as error:
        _refuse(error)


def _refuse(error: ValidationError) -> NoReturn:
    print(refusal(error), file=sys.stderr, flush=True)
    # SystemExit, not an exception a caller's "except Exception" would turn into a
    # traceback (uvicorn's loader and Celery's -A option both catch those).
    raise SystemExit(EX_CONFIG) from None
