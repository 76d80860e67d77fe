"""In real Chromium: a batch's page marks the row whose call waits on a spend cap with the
cap's words, as `interlock batch status` does; a run's page names the configuration files
it was created with, each with the start of its SHA-256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD
from tests.server.test_batch_marks_api import CONFIG, KEY, TEXT, cap_wait, held_batch

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"


def test_batch_page_marks_a_row_waiting_on_a_spend_cap(
    browser: Browser, make_server: ServerFactory
) -> None:
    """Of two rows in flight, the one whose call waits on cap 'daily' shows `waiting: spend
    cap` under its status and the cap's words in its last cell; the attention panel counts
    it; the other row shows no mark; once the wait ends the page, reloaded, shows none."""
    HOLD.clear()
    server = make_server()
    try:
        first, _ = held_batch(server, "capped", 2)
        cap_wait(server, first)
        page = open_page(browser, f"{server.url}/ui/#/batches/capped")
        capped = page.locator('#batch-rows tr[data-row="1"]')
        expect(capped.locator(".row-mark")).to_have_text("waiting: spend cap")
        expect(capped.locator(".row-values .why")).to_have_text(TEXT)
        expect(page.locator("#batch-spend-capped")).to_contain_text(
            "1 row(s) in flight wait on a spend cap"
        )
        expect(page.locator('#batch-rows tr[data-row="2"] .row-mark')).to_have_count(0)
        expect(page.locator("#batch-undriven")).to_have_count(0)
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "batch_spend_cap.png"), full_page=True)
        driver = server.service.orchestrator.drivers[first]
        driver.spend_waits.clear()
        driver.write_status()
        page.reload()
        expect(page.locator('#batch-rows tr[data-row="1"] .pill')).to_have_text("running")
        expect(page.locator("#batch-rows .row-mark")).to_have_count(0)
        expect(page.locator("#batch-spend-capped")).to_have_count(0)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        HOLD.set()


def test_run_page_names_its_config_file_and_hash(
    browser: Browser, make_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started with the interlock.toml beside its workflow shows `config:` with that
    file's path and the first 12 characters of its SHA-256 (the whole hash in its title),
    no key; once the file is edited, the page says it changed since the run started."""
    monkeypatch.setenv("GATEWAY_KEY", KEY)
    config = tmp_path / "interlock.toml"
    config.write_text(CONFIG)
    digest = hashlib.sha256(CONFIG.encode()).hexdigest()
    server = make_server()
    run_id = server.start_run("modelled", "Configured")
    server.wait_status(run_id, "delivered")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    line = page.locator("#run-config")
    expect(line).to_have_text(f"config: {config} (sha256 {digest[:12]})")
    assert line.locator(".config-file").get_attribute("title") == f"{config}\nsha256 {digest}"
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "run_config.png"))
    assert KEY not in page.content()
    config.write_text(CONFIG + "\n# edited\n")
    page.reload()
    expect(line).to_have_text(
        f"config: {config} (sha256 {digest[:12]}) (changed since the run started)"
    )
    assert page.errors == []  # type: ignore[attr-defined]
