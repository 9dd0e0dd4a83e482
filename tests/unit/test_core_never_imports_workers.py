"""Dependencies point inwards: ``workers`` imports ``orchestrator``, never the reverse.

Two checks, because either alone can miss a case: every module under ``orchestrator/`` is
imported in a fresh interpreter and ``workers`` must not have been loaded by any of them;
and no ``import`` statement anywhere under ``orchestrator/`` (a lazy one inside a function
included) names ``workers``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "orchestrator"


def _core_modules() -> list[str]:
    modules = []
    for path in sorted(CORE.rglob("*.py")):
        if "migrations" in path.parts:
            continue  # Alembic's env and revisions run only inside Alembic
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _imported_names(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_importing_every_module_of_the_core_loads_nothing_from_workers() -> None:
    modules = _core_modules()
    assert "orchestrator.bootstrap" in modules and "orchestrator.engine.runner" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "loaded = sorted(m for m in sys.modules if m == 'workers' or m.startswith('workers.'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"the core loaded {result.stdout.strip()}"


def test_no_import_statement_in_the_core_names_workers() -> None:
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for name in _imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            if name == "workers" or name.startswith("workers."):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []
