"""Services take the few collaborators they use, never the whole ``Container``.

The composition root (``orchestrator.bootstrap``) imports the services and binds their
collaborators (``container.uow``, ``container.read_only_uow``, ``container.publisher``,
``container.settings``, ``container.relay()``); a service that imports the root, or takes a
``container`` argument, hides what it needs behind a service locator.  Checked on the
source (every ``import``, lazy and ``TYPE_CHECKING`` ones included, and every function's
parameters) of the service layers.

``KNOWN_EXCEPTIONS`` would still take the container (none left: the accept path and API-key
authentication take theirs too).  The set may only shrink: a module that no longer needs
its place in it fails the last test until it is removed from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE_LAYERS = ("orchestrator/services", "orchestrator/ops", "orchestrator/events")
KNOWN_EXCEPTIONS: frozenset[str] = frozenset()
COMPOSITION_ROOT = "orchestrator.bootstrap"


def _service_modules() -> list[Path]:
    return sorted(path for layer in SERVICE_LAYERS for path in (ROOT / layer).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _container_uses(path: Path) -> list[str]:
    """Where ``path`` imports the composition root or takes a ``container`` parameter."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name == COMPOSITION_ROOT
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            if COMPOSITION_ROOT in imported:
                found.append(f"line {node.lineno}: from {node.module} import …")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
            found += [
                f"line {node.lineno}: {node.name}({arg.arg})"
                for arg in every
                if arg.arg == "container"
            ]
    return found


def test_the_check_sees_the_modules_it_guards() -> None:
    names = {_relative(path) for path in _service_modules()}
    assert "orchestrator/ops/commands.py" in names
    assert "orchestrator/events/relay.py" in names
    assert names >= KNOWN_EXCEPTIONS, "a known exception was moved or deleted: drop it here"


def test_no_service_module_imports_the_container_or_takes_one() -> None:
    offenders = {
        _relative(path): uses
        for path in _service_modules()
        if _relative(path) not in KNOWN_EXCEPTIONS and (uses := _container_uses(path))
    }
    assert offenders == {}, "pass the collaborators (uow, publisher, settings…) instead"


def test_the_known_exceptions_only_shrink() -> None:
    finished = sorted(name for name in KNOWN_EXCEPTIONS if not _container_uses(ROOT / name))
    assert finished == [], f"{finished} no longer take the container: remove them from the set"
