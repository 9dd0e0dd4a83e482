"""The README is the landing page: short, undated, and its two commands are real targets.

What payorch is, the two commands for a fresh machine, a quick start and links into the
documentation site; everything else lives in ``docs/`` (issue 37)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
CI_RUN = ROOT / ".ci" / "run"
MAX_LINES = 200
DATE = re.compile(r"(19|20)\d\d-[01]\d-[0-3]\d")
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _make_targets() -> set[str]:
    text = MAKEFILE.read_text(encoding="utf-8")
    return {match.group(1) for match in re.finditer(r"^([A-Za-z][\w.-]*):", text, re.M)}


def _first_code_block(text: str) -> list[str]:
    match = re.search(r"```sh\n(.*?)```", text, re.S)
    assert match is not None, "the README has no sh code block"
    return [line.split("#", 1)[0].strip() for line in match.group(1).splitlines()]


def test_the_readme_is_short() -> None:
    assert len(_readme().splitlines()) <= MAX_LINES


def test_the_readme_has_no_dates_and_no_ci_run_logs() -> None:
    text = _readme()
    assert DATE.search(text) is None, DATE.search(text)
    assert "CI run" not in text


def test_the_two_commands_come_first_and_are_makefile_targets() -> None:
    commands = [line for line in _first_code_block(_readme()) if line]
    assert commands == ["make demo", "make test"]
    targets = _make_targets()
    for command in commands:
        assert command.split()[1] in targets, f"{command!r} is not a Makefile target"


def test_ci_runs_the_readmes_test_command() -> None:
    assert re.search(r"^exec make test$", CI_RUN.read_text(encoding="utf-8"), re.M)


def test_every_relative_link_in_the_readme_points_at_a_file() -> None:
    links = [match.group(1) for match in LINK.finditer(_readme())]
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def test_the_docs_targets_the_readme_names_exist() -> None:
    text = _readme()
    targets = _make_targets()
    for target in ("docs", "docs-serve"):
        assert f"make {target}" in text
        assert target in targets
