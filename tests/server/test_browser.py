"""The dashboard in a real browser (Debian's Chromium, driven by Playwright)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD, SECRET, Server, token

__all__ = ["browser"]  # the module's Chromium fixture

# Kept after the run for a person to look at (git ignores them); docs/screenshots.py makes the
# README's pictures.
SHOTS = Path(__file__).resolve().parent / "screenshots"


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
    """The Cancel button asks first (keeping the run when told to), then stops it with the
    reason given, and the page follows the dark color scheme."""
    run_id = server.start_run("gated", "Waits for a signal")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}", dark=True)
    expect(page.locator("h1 .pill")).to_have_text("running")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 18, 24)"
    page.click("#cancel")
    expect(page.get_by_role("dialog", name="Cancel this run?")).to_be_visible()
    page.click("#cancel-keep")
    expect(page.locator("#cancel")).to_be_focused()
    page.wait_for_timeout(300)
    expect(page.locator("h1 .pill")).to_have_text("running")  # kept: nothing was sent
    page.click("#cancel")
    page.fill("#cancel-reason", "Wrong topic")
    page.click("#cancel-confirm")
    expect(page.locator("h1 .pill")).to_have_text("cancelled", timeout=15_000)
    expect(page.locator(".failure")).to_contain_text("Cancelled: Wrong topic")
    page.screenshot(path=str(tmp_path / "dark.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def with_token(page: Page, value: str, *, asked: bool = False) -> None:
    """Give the dashboard a token as a person would: in the token dialog (which the page opens
    by itself when it was `asked` for one)."""
    if not asked:
        page.locator("#token-btn").click()
    expect(page.locator("#token-dialog")).to_be_visible()
    page.fill("#token-input", value)
    page.click("#token-save")


@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
def test_note_toasts_and_download(
    browser: Browser, make_server: ServerFactory, tmp_path: Path, auth: bool
) -> None:
    """A note typed while the run works survives the redraw when it pauses and goes with the
    approval; only new notifications pop up; the download link works, with auth on and off."""
    HOLD.clear()
    server = make_server(auth_secret=SECRET) if auth else make_server()
    operator = token(["read", "operate"])
    headers = {"Authorization": f"Bearer {operator}"} if auth else {}
    started = server.http.post(
        "/api/runs", json={"pipeline": "held", "topic": "Tidal maps"}, headers=headers
    )
    run_id = started.json()["run_id"]
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    if auth:
        with_token(page, operator, asked=True)
    expect(page.locator("h1 .pill")).to_have_text("running")
    expect(page.locator("#approve")).to_be_disabled()  # nothing to approve yet
    page.click("#note")
    page.keyboard.type("Ship it after the legend fix")
    HOLD.set()
    expect(page.locator("h1 .pill")).to_have_text("paused")
    expect(page.locator("#toast")).to_contain_text("paused after draft")  # new: it pops up
    expect(page.locator("#note")).to_have_value("Ship it after the legend fix")
    expect(page.locator("#note")).to_be_focused()
    page.keyboard.type("!")
    expect(page.locator("#note")).to_have_value("Ship it after the legend fix!")
    page.screenshot(path=str(tmp_path / f"note-{auth}.png"), full_page=True)
    page.click("#approve")
    expect(page.locator("h1 .pill")).to_have_text("delivered")
    expect(page.locator("#trace")).to_contain_text("Ship it after the legend fix!")
    page.click(".tabs button:has-text('final.md')")
    expect(page.locator("#output h2")).to_contain_text("Verdict")
    with page.expect_download() as caught:
        page.click("#download")
    saved = tmp_path / "saved.md"
    caught.value.save_as(saved)
    assert "Held notes on **Tidal maps**" in saved.read_text()
    assert caught.value.suggested_filename == "final.md"
    # Opening the delivered run again, its history arriving over the stream's replay (the
    # trace's own request answered empty, as if slower): its old notifications stay quiet.
    page.route("**/api/runs/*/events*", lambda route: route.fulfill(json=[]))
    page.reload()
    expect(page.locator("#conn")).to_have_text("ended")
    expect(page.locator("#trace tr")).not_to_have_count(0)
    page.wait_for_timeout(800)
    assert page.locator("#toast").is_hidden(), page.locator("#toast").text_content()  # no retry
    page.screenshot(path=str(tmp_path / f"reopened-{auth}.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def test_read_only_token_cannot_press_actions(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """With a token that may only read, Approve, Cancel, the review controls and the start
    form are not shown and the page says why; with an operate token they are."""
    server = make_server(auth_secret=SECRET)
    operator = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    run_id = server.http.post(
        "/api/runs", json={"pipeline": "review", "topic": "Read only"}, headers=operator
    ).json()["run_id"]
    deadline = time.monotonic() + 30
    while server.http.get(f"/api/runs/{run_id}", headers=operator).json()["status"] != "paused":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    with_token(page, token(["read"]), asked=True)
    expect(page.locator("h1 .pill")).to_have_text("paused")
    for control in ("#approve", "#cancel", "#note", "#reject", "#edit-output"):
        expect(page.locator(control)).to_have_count(0)
    expect(page.locator("#read-only")).to_contain_text("operate scope")
    page.screenshot(path=str(tmp_path / "read-only.png"), full_page=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "read-only.png"))
    page.goto(f"{server.url}/ui/#/")
    expect(page.locator("#runs tr")).to_have_count(1)
    expect(page.get_by_role("button", name="Start run")).to_have_count(0)
    with_token(page, token(["read", "operate"]))
    expect(page.get_by_role("button", name="Start run")).to_be_enabled()
    page.goto(f"{server.url}/ui/#/runs/{run_id}")
    expect(page.locator("#approve")).to_be_enabled()
    expect(page.locator("#reject")).to_be_enabled()
    expect(page.locator("#read-only")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]


def test_api_docs_render_offline(browser: Browser, server: Server, tmp_path: Path) -> None:
    """/api/docs renders the API with every request outside this server refused, as on a
    machine without internet."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    outside: list[str] = []

    def only_here(route: Route) -> None:
        if route.request.url.startswith(server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_here)
    page = context.new_page()
    page.goto(f"{server.url}/api/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("interlock")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    expect(page.locator("button.authorize")).to_be_visible()  # a bearer token can be given
    page.screenshot(path=str(tmp_path / "docs.png"))
    assert outside == []
    context.close()
