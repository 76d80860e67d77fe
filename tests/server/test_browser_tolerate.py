"""The run page of a fan-out with `tolerate`: the phase strip counts the items by outcome and
the attention panel lists each failed item with its error."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, expect
from tests.cli.test_tolerate_cli import FLOW as CLI_FLOW
from tests.cli.test_tolerate_cli import JOIN, WRITE
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import write_workflow

__all__ = ["browser"]
FLOW = CLI_FLOW.replace("TOLERATE", "2").replace("WRITE", WRITE).replace("JOIN", JOIN)


def test_run_page_shows_each_fan_out_items_outcome(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """Two of four items fail under `tolerate: 2`: the delivered run's page says 2/4 done and
    2 failed, and names items 1 and 3 with their errors."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("job", "t")
    run = server.wait_status(run_id, "delivered", timeout=60)
    items = next(p for p in run["phases"] if p["id"] == "write")["items"]
    assert (items["completed"], items["failed"]) == (2, 2)
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    expect(page.locator(".items-outcome")).to_have_text("2/4 done · 2 failed (tolerate 2)")
    note = page.locator("#failed-items-write")
    expect(note).to_contain_text("2 of 4 items of write failed (tolerate 2, 2 may fail)")
    expect(note).to_contain_text("item 1 (writer@1.1): exited with code 1: cannot write bad")
    expect(note).to_contain_text("item 3 (writer@1.3)")
    assert page.errors == []  # type: ignore[attr-defined]
