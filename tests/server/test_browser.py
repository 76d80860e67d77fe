"""The dashboard in a real browser (Debian's Chromium, driven by Playwright)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from tests.server.helpers import Server

CHROMIUM = Path("/usr/bin/chromium")
# Kept after the run for a person to look at (git ignores them); docs/screenshots.py makes the
# README's pictures.
SHOTS = Path(__file__).resolve().parent / "screenshots"
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


def test_watch_approve_and_deliver_live(browser: Browser, server: Server, tmp_path: Path) -> None:
    """A run started from the dashboard advances live, is approved there, and delivers."""
    done = server.start_run("quick", "Quarterly summary of tidal energy")
    failed = server.start_run("broken", "A worker that gives up")
    server.wait_status(done, "delivered")
    server.wait_status(failed, "failed")
    page = open_page(browser, f"{server.url}/ui/")
    expect(page.locator("#runs tr")).to_have_count(2)
    expect(page.locator("#conn")).to_have_text("live")
    page.select_option("#start-pipeline", "review")
    page.fill("#start-topic", "Solar sails <img src=x onerror=alert(1)>")
    page.click("text=Start run")
    expect(page.locator("h1 .pill")).to_have_text("paused", timeout=15_000)
    expect(page.locator(".step.s-paused")).to_have_text("draftpaused")
    expect(page.locator("#trace")).to_contain_text("pause_after")
    expect(page.locator("#output")).to_contain_text(
        "Notes on Solar sails <img src=x onerror=alert(1)>."
    )
    assert page.locator("#output img").count() == 0  # model text is shown, never interpreted
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)
    page.fill("#note", "Go ahead")
    page.click("#approve")
    expect(page.locator("h1 .pill")).to_have_text("delivered", timeout=15_000)
    expect(page.locator("#trace")).to_contain_text("approved by anonymous: Go ahead")
    page.click(".tabs button:has-text('final.md')")
    expect(page.locator("#output h2")).to_contain_text("Verdict")
    expect(page.locator("#approve")).to_have_count(0)  # nothing to act on once ended
    expect(page.get_by_text("null", exact=True)).to_have_count(0)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)
    page.goto(f"{server.url}/ui/#/")
    expect(page.locator("#runs tr")).to_have_count(3)
    page.screenshot(path=str(tmp_path / "runs.png"))
    assert page.errors == []  # type: ignore[attr-defined]


def test_cancel_from_dashboard_in_dark_mode(
    browser: Browser, server: Server, tmp_path: Path
) -> None:
    """The Cancel button stops a running run, and the page follows the dark color scheme."""
    run_id = server.start_run("gated", "Waits for a signal")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}", dark=True)
    expect(page.locator("h1 .pill")).to_have_text("running")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 18, 24)"
    page.click("#cancel")
    expect(page.locator("h1 .pill")).to_have_text("cancelled", timeout=15_000)
    expect(page.locator(".failure")).to_contain_text("Cancelled")
    page.screenshot(path=str(tmp_path / "dark.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]
