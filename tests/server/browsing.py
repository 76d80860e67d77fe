"""Chromium for the dashboard's browser tests: one browser per test module, pages that fail
the test on any script error, and a token given as a person gives it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium from the system; a missing browser fails the tests rather than skipping them."""
    assert CHROMIUM.exists(), "install Chromium: apt-get install -y chromium"
    expect.set_options(timeout=15_000)  # a loaded machine: wait longer, never pass wrongly
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield found
        found.close()


def open_page(browser: Browser, url: str, dark: bool = False) -> Page:
    """A page at `url` that fails the test on any script error or dialog."""
    context = browser.new_context(
        viewport={"width": 1360, "height": 900}, color_scheme="dark" if dark else "light"
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    page.goto(url)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def with_token(page: Page, value: str, *, asked: bool = False) -> None:
    """Give the dashboard a token in the token dialog (opened by the page itself when it
    `asked` for one)."""
    if not asked:
        page.locator("#token-btn").click()
    expect(page.locator("#token-dialog")).to_be_visible()
    page.fill("#token-input", value)
    page.click("#token-save")
