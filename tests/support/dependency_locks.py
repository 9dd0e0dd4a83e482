"""Is a lock file (requirements.lock, requirements-dev.lock) up to date with pyproject.toml?

Offline: reads the two files, never the package index.  A lock written by `make lock`
(uv pip compile) pins every package with `name==version`, lists its hashes, and marks the
project's own requirements `# via payorch (pyproject.toml)`.  It is out of date when

* a requirement of pyproject.toml has no pin, or its pin is outside the requirement's range
  (a dependency added, or a floor raised, without `make lock`);
* a pin is marked as the project's own requirement but pyproject.toml no longer asks for it
  (a dependency removed without `make lock`);
* a pin has no hash (pip's --require-hashes would refuse the whole file).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# The interpreter and platform the locks are compiled for (the Makefile's `lock` target).
LOCK_ENVIRONMENT = {
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}

PROJECT_MARK = "payorch (pyproject.toml)"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(?P<version>[^\s;\\]+)")


@dataclass
class Pin:
    version: Version
    hashes: int = 0
    via: list[str] = field(default_factory=list)


def parse_lock(text: str) -> dict[str, Pin]:
    """The pins of a lock file by canonical name: version, how many hashes, and what asked
    for it (the `# via` annotations)."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for line in text.splitlines():
        match = _PIN.match(line)
        if match is not None:
            current = Pin(Version(match["version"]))
            pins[canonicalize_name(match["name"])] = current
            continue
        stripped = line.strip()
        if current is None or not stripped:
            continue
        if stripped.startswith("--hash="):
            current.hashes += 1
        elif stripped.startswith("#"):
            via = stripped.lstrip("#").strip()
            via = via.removeprefix("via").strip()
            if via:
                current.via.append(via)
    return pins


def project_requirements(pyproject: Path, extras: tuple[str, ...]) -> list[Requirement]:
    """pyproject.toml's runtime requirements and those of the given extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def lock_problems(requirements: list[Requirement], lock_text: str) -> list[str]:
    """What makes the lock out of date with these requirements; empty when it is current."""
    pins = parse_lock(lock_text)
    problems: list[str] = []
    if not pins:
        return ["the lock pins nothing"]
    asked: set[str] = set()
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate(LOCK_ENVIRONMENT):
            continue
        name = canonicalize_name(requirement.name)
        asked.add(name)
        pin = pins.get(name)
        if pin is None:
            problems.append(f"{requirement} is not pinned (run make lock)")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{name}=={pin.version} is outside {requirement} (run make lock)")
    for name, pin in sorted(pins.items()):
        if PROJECT_MARK in pin.via and name not in asked:
            problems.append(
                f"{name}=={pin.version} is pinned for {PROJECT_MARK}, which no longer asks "
                "for it (run make lock)"
            )
        if pin.hashes == 0:
            problems.append(f"{name}=={pin.version} has no hash (pip --require-hashes refuses it)")
    return problems
