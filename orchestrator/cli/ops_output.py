"""Printing operator commands' results and refusals (shared by ``leases`` and ``payments``)."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

# Distinct exit codes so scripts can tell "no such payment" from "not now"; re-exported
# for the commands that print through this module.
from orchestrator.cli.exit_codes import EXIT_CONFLICT as EXIT_CONFLICT
from orchestrator.cli.exit_codes import EXIT_INVALID as EXIT_INVALID
from orchestrator.cli.exit_codes import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from orchestrator.cli.exit_codes import EXIT_PRECONDITION_FAILED as EXIT_PRECONDITION_FAILED
from orchestrator.cli.output import errors, print_json, print_table
from orchestrator.domain.preconditions import TagList, parse_tag_list
from orchestrator.ops.commands import OperatorAction
from orchestrator.ops.errors import (
    InvalidFilter,
    InvalidReason,
    OpsConflict,
    OpsError,
    PaymentNotFound,
    PreconditionFailed,
    UnknownConnectorAccount,
)
from orchestrator.ops.lease_documents import action_representation

IfMatchOption = Annotated[
    str | None,
    typer.Option(
        "--if-match",
        help="The lease's etag as 'leases list' showed it (e.g. '\"7.processing\"'): "
        "refuse (exit 5, nothing changed) if the lease changed since.",
        show_default=False,
    ),
]


def parse_if_match(value: str | None) -> TagList | None:
    """The CLI also takes the tag without its double quotes (shells eat them)."""
    if value is None:
        return None
    text = value.strip()
    if text != "*" and not text.startswith(('"', "W/")):
        text = f'"{text}"'
    parsed = parse_tag_list(text)
    if parsed is None:
        errors.print(f"--if-match: not an entity tag: {value!r}")
        raise typer.Exit(EXIT_INVALID)
    return parsed


def fail(error: OpsError, *, as_json: bool) -> NoReturn:
    code = 1
    kind = "error"
    if isinstance(error, InvalidReason | InvalidFilter):
        code, kind = EXIT_INVALID, "invalid"
    elif isinstance(error, PaymentNotFound | UnknownConnectorAccount):
        code, kind = EXIT_NOT_FOUND, "not_found"
    elif isinstance(error, PreconditionFailed):
        code, kind = EXIT_PRECONDITION_FAILED, "precondition_failed"
    elif isinstance(error, OpsConflict):
        code, kind = EXIT_CONFLICT, "conflict"
    if as_json:
        print_json({"error": kind, "detail": error.message})
    errors.print(error.message)
    raise typer.Exit(code)


def print_action(action: OperatorAction, *, as_json: bool) -> None:
    data = action_representation(action)
    if as_json:
        print_json(data)
        return
    print_table(
        f"{action.action}: {action.payment_id}",
        ["status", "old token", "new token", "re-queued", "audit id", "operator"],
        [
            [
                data["status"],
                action.old_token,
                action.new_token,
                {True: "yes", False: "no (the sweeper will)", None: "-"}[action.published],
                action.audit.id,
                action.audit.actor_name,
            ]
        ],
    )
    if action.action == "park":
        errors.print(
            "The payment was out of attempts and is now needs_attention; "
            f"run 'payorch payments retry {action.payment_id} --reason ...' to retry it."
        )
