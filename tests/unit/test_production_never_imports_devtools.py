"""Production code never needs ``devtools`` (the simulator and the demo).

Every module under ``orchestrator/`` and ``workers/`` is imported in a fresh interpreter in
which ``devtools`` cannot be imported (as in the production image), and the two commands that
start the tools fail with a plain message and exit status 69 rather than a traceback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Make ``import devtools`` fail the way a missing package does, before anything else runs.
_BLOCK_DEVTOOLS = textwrap.dedent(
    """
    import importlib.abc, sys

    class _NoDevtools(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "devtools" or name.startswith("devtools."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoDevtools())
    """
)


def _production_modules() -> list[str]:
    modules = []
    for package in ("orchestrator", "workers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue  # Alembic's env and revisions run only inside Alembic
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK_DEVTOOLS + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_every_production_module_imports_without_devtools() -> None:
    modules = _production_modules()
    assert "orchestrator.cli.main" in modules and "workers.tasks" in modules
    result = _run(f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\n")
    assert result.returncode == 0, result.stderr


def test_the_demo_and_the_simulator_commands_say_devtools_is_missing() -> None:
    for command in (["demo"], ["provider-sim", "--port", "0"]):
        result = _run(
            "import sys\nfrom orchestrator.cli.main import main\n"
            f"sys.argv = ['payorch', *{command!r}]\nsys.exit(main())\n"
        )
        assert result.returncode == 69, (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert "no development tools" in result.stderr
