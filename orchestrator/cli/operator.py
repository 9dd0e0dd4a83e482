"""Who runs an operator command from the CLI, for the audit trail.

The CLI talks to the database directly, so whoever runs it already holds the database
credentials: the operator name is a claim recorded for accountability, not an
authentication.  It defaults to ``$USER`` (``--operator`` or ``PAYORCH_OPERATOR``
override it) and is audited with the actor id ``cli:<name>``; ops API calls are audited
under the calling API client's id and name instead.
"""

from __future__ import annotations

import getpass
import re
from typing import Annotated

import typer

from orchestrator.cli.output import errors
from orchestrator.engine.takeover import MAX_ACTOR_ID_LENGTH, Actor

CLI_ACTOR_PREFIX = "cli:"
_NAME = re.compile(rf"^[A-Za-z0-9._@+-]{{1,{MAX_ACTOR_ID_LENGTH - len(CLI_ACTOR_PREFIX)}}}$")

OperatorOption = Annotated[
    str | None,
    typer.Option(
        "--operator",
        envvar="PAYORCH_OPERATOR",
        help="Your name for the audit trail (default: $USER).",
        show_default=False,
    ),
]


def cli_operator(name: str | None) -> Actor:
    """The audited actor for ``name``, or the login name; exits when neither is usable."""
    if name is None:
        try:
            name = getpass.getuser()
        except (OSError, KeyError):
            name = ""
    name = name.strip()
    if not _NAME.match(name):
        errors.print(
            f"operator name {name!r} is not usable: pass --operator NAME (letters, digits, "
            f"'._@+-', at most {MAX_ACTOR_ID_LENGTH - len(CLI_ACTOR_PREFIX)} characters)"
        )
        raise typer.Exit(2)
    return Actor.operator(CLI_ACTOR_PREFIX + name, name)
