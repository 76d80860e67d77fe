"""The run page in real Chromium while a call waits on a spend cap: the header, the
attention note and the task's row say which cap and until when, and stop once it goes on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD

from interlock.providers.spend_guard import CapWait

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"
TEXT = "waiting: spend cap 'daily' (USD 50.00) until 00:00 UTC"


def test_run_page_shows_a_call_waiting_on_a_spend_cap(
    browser: Browser, make_server: ServerFactory
) -> None:
    """A running task told to wait on cap 'daily' (as `CappedProvider` tells the runtime)
    makes the page show the run waiting, the cap, its amount and reset, on the task's row
    too; when it waits no more, the run shows running again."""
    HOLD.clear()
    server = make_server()
    run_id = server.start_run("held", "Spend")
    try:
        orchestrator = server.service.orchestrator
        deadline = time.monotonic() + 10
        while "drafter@1" not in _handles(orchestrator.drivers.get(run_id)):
            assert time.monotonic() < deadline, "the drafter never started"
            time.sleep(0.02)
        driver = orchestrator.drivers[run_id]
        now = time.time()
        wait = CapWait(text=TEXT, since=now, cap="daily", amount_usd=50.0, until=now + 3600)
        driver.spend_waits["drafter@1"] = wait.to_json()
        driver.write_status()
        page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
        expect(page.locator("h1 .pill")).to_have_text("waiting")
        note = page.locator("#waiting")
        expect(note).to_contain_text("Waiting: spend cap 'daily' (USD 50.00) until 00:00 UTC")
        expect(note).to_contain_text("(task drafter@1)")
        expect(page.locator(".spend-wait")).to_have_text(TEXT)
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "spend_wait.png"), full_page=True)
        listed = server.http.get("/api/runs").json()
        assert [r["status"] for r in listed if r["run_id"] == run_id] == ["waiting"]
        driver.spend_waits.clear()
        driver.write_status()
        page.reload()
        expect(page.locator("h1 .pill")).to_have_text("running")
        expect(page.locator(".spend-wait")).to_have_count(0)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        HOLD.set()


def _handles(driver: Any) -> Any:
    """The tasks the run's driver runs now (none before it is taken)."""
    return {} if driver is None else driver.workers.handles
