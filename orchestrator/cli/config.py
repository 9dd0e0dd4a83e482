"""The one way a ``payorch`` command gets its settings.

Every command that reads configuration calls ``load_settings()``: bad configuration is
refused before anything starts, with one line per problem naming the environment
variable, exit status ``EX_CONFIG`` (78) and no traceback.  A traceback would bury the
message (in a container log it may be the only thing an operator reads) and, worse,
pydantic's default error text repeats the input: the Stripe key and the database
password.  ``Settings`` hides inputs in its errors too (``hide_input_in_errors``); this
module never asks for them (``include_input=False``), so neither layer alone is trusted.
"""

from __future__ import annotations

import typer
from pydantic import ValidationError

from orchestrator.settings import Settings
from orchestrator.validation_messages import error_message

EX_CONFIG = 78  # sysexits.h: configuration error


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


def load_settings() -> Settings:
    """Settings from the environment, or a clear message and exit status 78."""
    try:
        return Settings()
    except ValidationError as error:
        typer.echo(
            f"payorch: invalid configuration:\n{describe_configuration_error(error)}", err=True
        )
        raise typer.Exit(EX_CONFIG) from None
