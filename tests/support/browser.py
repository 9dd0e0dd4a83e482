"""A real browser for the console tests: Debian's Chromium, driven by Playwright.

Playwright's own browser download is not reachable from the build machines, so the tests
launch the system Chromium (``executable_path``).  Like PostgreSQL and RabbitMQ
(tests/support/services.py), a missing Chromium is installed from Debian packages, under
the machine-wide service lock, when the session first needs it; ``.ci/run`` does it ahead
of the suite so the install is not billed to a test's timeout::

    python -m tests.support.browser --ensure [--no-install]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.locking import SERVICE_LOCK
from tests.support.system import apt_install, which

log = logging.getLogger("payorch.tests.browser")

# The real binary first: /usr/bin/chromium is Debian's wrapper script, which works too
# but adds a shell in between.
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
DEBIAN_PACKAGE = "chromium"
# Root has no user namespace sandbox for Chromium; the pages are our own console.
LAUNCH_ARGS = ("--no-sandbox", "--disable-dev-shm-usage")


def find_chromium() -> str | None:
    for candidate in CANDIDATES:
        path = candidate if os.path.isabs(candidate) else which(candidate)
        if path and os.access(path, os.X_OK) and Path(path).is_file():
            return path
    return None


def ensure_chromium(*, allow_install: bool = True) -> str:
    """The path of a Chromium executable, installing Debian's package when none is there."""
    found = find_chromium()
    if found is not None:
        return found
    if not allow_install:
        raise RuntimeError(f"Chromium is not installed (apt-get install {DEBIAN_PACKAGE})")
    with SERVICE_LOCK.held():
        found = find_chromium()  # another session may have installed it meanwhile
        if found is None:
            log.warning("installing %s for the console's browser tests", DEBIAN_PACKAGE)
            apt_install([DEBIAN_PACKAGE])
            found = find_chromium()
    if found is None:
        raise RuntimeError(f"{DEBIAN_PACKAGE} was installed but no executable was found")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.browser",
        description="Make Chromium available for the console's browser tests.",
    )
    parser.add_argument("--ensure", action="store_true", help="install Chromium when absent")
    parser.add_argument("--no-install", action="store_true", help="only look for it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="payorch browser: %(message)s")
    try:
        path = ensure_chromium(allow_install=args.ensure and not args.no_install)
    except RuntimeError as error:
        print(f"payorch browser: {error}", file=sys.stderr)
        return 1
    print(f"payorch browser: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
