"""Import ``devtools`` (simulator, demo) lazily, with a plain message where it is absent.

The production image ships ``orchestrator/`` and ``workers/`` only; ``payorch demo`` and
``payorch provider-sim`` belong to a source checkout (``make demo``).  Importing them at
module level would make every CLI command fail in production; importing lazily and failing
with a traceback would tell an operator nothing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import typer

from orchestrator.cli.exit_codes import EX_UNAVAILABLE


def import_devtools(module: str, *, command: str) -> ModuleType:
    """``importlib.import_module(module)``, or exit 69 naming what is missing."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (exc.name == "devtools" or exc.name.startswith("devtools.")):
            raise
        typer.echo(
            f"payorch {command}: this installation has no development tools (the 'devtools' "
            "package: provider simulator and demo); run it from a source checkout "
            "(make demo), not from the production image",
            err=True,
        )
        raise typer.Exit(EX_UNAVAILABLE) from None
