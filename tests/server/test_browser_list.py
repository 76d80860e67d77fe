"""The runs list and the start form in real Chromium: search, filters, sorting, pages, and a
run started from a form generated from the pipeline's declared inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page, with_token
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token, write_workflow
from tests.server.test_run_list_api import FLOW

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"


def test_search_filters_sort_and_pages(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """55 runs: the list shows 50 and a second page of 5 (and back); a search by topic or by
    an input value, the pipeline filter (kept across a visit to a run), the status filter
    and a date range narrow it; the sorts reorder it."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)], rate_burst=100)
    runs = [server.start_run("quick", f"Survey {n}") for n in range(53)]
    special = server.start_run(
        "params", "Kelp special", inputs={"who": "ana", "region": "atlantis"}
    )
    runs.append(server.start_run("params", "Other", inputs={"who": "bo"}))
    server.wait_status(runs[-1], "delivered")
    server.wait_status(special, "delivered")
    page = open_page(browser, f"{server.url}/ui/")
    rows = page.locator("#runs tr")
    expect(rows).to_have_count(50)
    expect(page.locator("#page-newer")).to_be_disabled()
    page.click("#page-older")
    expect(rows).to_have_count(5)
    expect(page.locator("#page-number")).to_have_text("page 2")
    expect(page.locator("#page-older")).to_be_disabled()
    page.click("#page-newer")
    expect(rows).to_have_count(50)
    search = page.get_by_role("searchbox", name="Search runs by id, topic or input value")
    search.focus()
    page.keyboard.type("kelp")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Kelp special")
    search.fill("atlantis")  # an input value
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(special)
    search.fill("")
    page.get_by_role("combobox", name="Filter by pipeline").select_option("params")
    expect(rows).to_have_count(2)
    rows.first.get_by_role("link").click()  # to a run and back: the filter still applies
    expect(page.locator("h1 .pill")).to_be_visible()
    page.go_back()
    expect(rows).to_have_count(2)
    expect(page.get_by_role("combobox", name="Filter by pipeline")).to_have_value("params")
    page.get_by_role("combobox", name="Filter by status").select_option("failed")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("No run matches.")
    page.get_by_role("combobox", name="Filter by status").select_option("")
    page.fill("#filter-until", "2001-01-01")
    expect(rows.first).to_contain_text("No run matches.")
    page.fill("#filter-until", "")
    page.get_by_role("combobox", name="Sort by").select_option("created:asc")
    expect(rows.first).to_contain_text(special)
    page.get_by_role("combobox", name="Filter by pipeline").select_option("")
    page.get_by_role("combobox", name="Sort by").select_option("cost:desc")
    expect(rows).to_have_count(50)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "runs-list.png"))
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
def test_start_form_from_declared_inputs(
    browser: Browser, make_server: ServerFactory, tmp_path: Path, auth: bool
) -> None:
    """The start form has a field per declared input (text, whole number, number, yes/no)
    with its default and description; a required input left empty stops the submit; the run
    started gets the typed values with their types and its page shows them."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)], **(
        {"auth_secret": SECRET} if auth else {}
    ))  # fmt: skip
    page = open_page(browser, f"{server.url}/ui/")
    if auth:
        with_token(page, token(["read", "operate"]), asked=True)
    form = page.get_by_role("form", name="Start a run")
    form.get_by_role("combobox", name="Pipeline to start").select_option("params")
    expect(page.get_by_label("region")).to_have_value("north")
    expect(page.get_by_label("region")).to_have_accessible_description("Where the survey is")
    expect(page.locator("#input-count")).to_have_attribute("type", "number")
    expect(page.locator("#input-ratio")).to_have_attribute("step", "any")
    expect(page.locator("#input-loud")).not_to_be_checked()
    page.fill("#start-topic", "Form run")
    page.click("#start-run")
    expect(page.locator("#input-who")).to_be_focused()  # required and empty: nothing sent
    page.locator("#input-who").type("ana")
    page.fill("#input-count", "7")
    page.fill("#input-ratio", "0.25")
    page.locator("#input-loud").check()
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"start-form-{auth}.png"))
    page.keyboard.press("Enter")
    expect(page.locator("h1 .pill")).to_be_visible()
    inputs = page.get_by_role("definition").all_text_contents()
    assert inputs == ["north", "7", "0.25", "true", "ana"], inputs
    run_id = page.locator("h1 + .mono").text_content() or ""
    headers = {"Authorization": f"Bearer {token(['read'])}"} if auth else {}
    run = server.http.get(f"/api/runs/{run_id}", headers=headers).json()
    assert run["inputs"] == {
        "region": "north",
        "count": 7,
        "ratio": 0.25,
        "loud": True,
        "who": "ana",
    }
    assert page.errors == []  # type: ignore[attr-defined]


def test_runs_list_follows_runs_live_and_shows_waiting_ones(
    browser: Browser, make_server: ServerFactory
) -> None:
    """With the list open, a run started elsewhere appears, shows `waiting` (saying for which
    signal) while it waits, and `delivered` once the signal came, without a page reload."""
    server = make_server()
    page = open_page(browser, f"{server.url}/ui/")
    expect(page.locator("#conn")).to_have_text("live")
    run_id = server.start_run("signalled", "Waits for payment")
    status = page.locator(f'#runs tr[data-run="{run_id}"] .run-status')
    expect(status.locator(".pill")).to_have_text("waiting")
    expect(status).to_have_attribute("title", "waiting for signal payment")
    sent = server.http.post(f"/api/runs/{run_id}/signals/payment", json={"data": {"amount": 1}})
    assert sent.status_code == 202
    expect(status.locator(".pill")).to_have_text("delivered")
    events = server.http.get(f"/api/runs/{run_id}").json()["events"]
    expect(page.locator(f'#runs tr[data-run="{run_id}"] .run-events')).to_have_text(str(events))
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert page.errors == []  # type: ignore[attr-defined]
