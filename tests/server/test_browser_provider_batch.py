"""The run page in real Chromium while a task's model call waits in a provider batch: its
row says the provider's batch id, when the batch was sent and what the provider said of it
last; gathered for a batch not sent yet, it says by when it goes out; answered, it is gone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD

from interlock.providers.batch_waits import BatchWait

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"
SENT = 1_796_212_980.0  # 2026-12-02 12:03 UTC


def test_run_page_shows_a_task_waiting_in_a_provider_batch(
    browser: Browser, make_server: ServerFactory
) -> None:
    """Told as `BatchingProvider` tells the runtime: gathered, then in batch `batch_abc`
    (in_progress), then nothing once the answer came."""
    HOLD.clear()
    server = make_server()
    run_id = server.start_run("held", "Batch")
    try:
        orchestrator = server.service.orchestrator
        deadline = time.monotonic() + 10
        while "drafter@1" not in _handles(orchestrator.drivers.get(run_id)):
            assert time.monotonic() < deadline, "the drafter never started"
            time.sleep(0.02)
        driver = orchestrator.drivers[run_id]
        gathered = BatchWait(text="gathered for a provider batch of 'cheap', sent by 12:13 UTC",
                             alias="cheap", status="gathered")  # fmt: skip
        driver.batch_waits["drafter@1"] = gathered.to_json()
        driver.write_status()
        page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
        row = page.locator(".provider-batch")
        expect(row).to_have_text("gathered for a provider batch of 'cheap', sent by 12:13 UTC")
        sent = BatchWait(text="in provider batch batch_abc, submitted 12:03 UTC, in_progress",
                         alias="cheap", tag="il0123", batch_id="batch_abc", submitted_at=SENT,
                         status="in_progress")  # fmt: skip
        driver.batch_waits["drafter@1"] = sent.to_json()
        driver.write_status()
        page.reload()
        expect(row).to_have_text(
            "in provider batch batch_abc, submitted 2026-12-02 12:03 UTC, "
            "provider status: in_progress"
        )
        expect(page.locator(".provider-batch .mono")).to_have_text("batch_abc")
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "provider_batch.png"), full_page=True)
        driver.batch_waits.clear()
        driver.write_status()
        page.reload()
        expect(page.locator("h1 .pill")).to_have_text("running")
        expect(row).to_have_count(0)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        HOLD.set()


def _handles(driver: Any) -> Any:
    """The tasks the run's driver runs now (none before it is taken)."""
    return {} if driver is None else driver.workers.handles
