"""Driving the ops console like a person: sign in, open pages, fill forms, read what the
page says.  Selectors are the ids and labels a person sees, not layout details."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page, Request

PAGES = {
    "overview": "/ops/",
    "queues": "/ops/queues",
    "charts": "/ops/charts",
    "payments": "/ops/payments",
    "webhooks": "/ops/webhooks",
}


@dataclass
class Console:
    page: Page
    base_url: str
    visited_payments: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("request", self._note_request)

    def _note_request(self, request: Request) -> None:
        # No CDN, no font service: every request stays on the console's own host.
        if not request.url.startswith(self.base_url) and not request.url.startswith("data:"):
            self.foreign_requests.append(request.url)

    def open(self, path: str) -> None:
        self.page.goto(path)
        match = re.fullmatch(r"/ops/payments/(pay_[0-9a-f]{32}).*", path)
        if match:
            self.visited_payments.append(match.group(1))

    def sign_in(self, api_key: str) -> None:
        self.open("/ops/sign-in")
        self.page.get_by_label("Ops API key").fill(api_key)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(re.compile(r".*/ops/$"))

    def row(self, section: str, payment_id: str) -> Locator:
        return self.page.locator(f"#{section} tr", has=self.page.locator(f"a:text('{payment_id}')"))

    def wait_for_row(self, section: str, payment_id: str, timeout: float = 30.0) -> Locator:
        """Reload the queues page until the payment shows up in ``section``."""
        deadline = time.monotonic() + timeout
        while True:
            self.open("/ops/queues")
            row = self.row(section, payment_id)
            if row.count() == 1:
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"{payment_id} never appeared in #{section}")
            time.sleep(0.5)

    def act_on_row(self, row: Locator, reason: str, button: str) -> None:
        row.get_by_label("reason").fill(reason)
        row.get_by_role("button", name=button).click()
        self.page.wait_for_url(re.compile(r".*/ops/payments/pay_[0-9a-f]{32}\?done=\d+$"))

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text()

    def wait_until(
        self, path: str, check: Callable[[], bool], timeout: float = 60.0, what: str = ""
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.open(path)
            if check():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"never true on {path}: {what}")
            time.sleep(0.5)

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=full_page)

    def screenshot_everything(self, folder: Path) -> None:
        """After a failure: the page as it was, then every console page as it is now."""
        with contextlib.suppress(PlaywrightError):
            self.screenshot(folder / "at-failure.png")
        targets = dict(PAGES)
        for payment_id in dict.fromkeys(self.visited_payments):
            targets[f"payment-{payment_id}"] = f"/ops/payments/{payment_id}"
        for name, path in targets.items():
            with contextlib.suppress(PlaywrightError):
                self.page.goto(path)
                self.screenshot(folder / f"{name}.png")
