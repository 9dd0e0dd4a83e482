"""Fixtures of the console's browser tests: one Chromium (Debian's, driven by Playwright)
for the whole session, a fresh browser context per test, and screenshots of every console
page in ``test-artifacts/`` when a test fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.browser.console_driver import Console
from tests.support.browser import LAUNCH_ARGS, ensure_chromium

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("PAYORCH_TEST_ARTIFACTS", ROOT / "test-artifacts"))

_reports = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None] | pytest.TestReport:
    report: pytest.TestReport = yield
    item.stash.setdefault(_reports, {})[report.when] = report
    return report


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    executable = ensure_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=list(LAUNCH_ARGS), headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def open_console(chromium: Browser, request: pytest.FixtureRequest) -> Iterator[type[Console]]:
    """``open_console(base_url)`` -> a Console in a fresh browser context (own cookies)."""
    opened: list[Console] = []

    def open_at(base_url: str) -> Console:
        context = chromium.new_context(base_url=base_url, viewport={"width": 1360, "height": 900})
        context.set_default_timeout(15_000)
        console = Console(context.new_page(), base_url)
        opened.append(console)
        return console

    yield open_at  # type: ignore[misc]
    failed = any(r.failed for r in request.node.stash.get(_reports, {}).values())
    for number, console in enumerate(opened):
        if failed:
            folder = ARTIFACTS / request.node.name / f"browser-{number}"
            console.screenshot_everything(folder)
        console.page.context.close()
