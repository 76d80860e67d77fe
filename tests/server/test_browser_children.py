"""Child runs in real Chromium: the parent's page shows its paused child and approves it, the
child's page leads back to its parent, and the runs list nests children and can hide them."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page
from tests.server.conftest import ServerFactory
from tests.server.helpers import write_workflow
from tests.server.test_child_runs import FLOW

from interlock.core.subpipelines import child_run_id

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"


def test_parent_page_shows_the_paused_child_and_approves_it_from_there(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """On the parent's page: "paused in child <id>: approve here or there", the pipeline
    task's row links the child with its state, the cost table counts the child's tokens so
    far, the timeline and graph mark the child task,
    and no send-back form is offered there (the review is the child's);
    the link opens the child's page, whose breadcrumb names the parent and the task; the runs
    list shows the child indented under its parent until "hide child runs" is ticked; and
    Approve on the parent's page lets both deliver."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("parent", "Otters")
    child = child_run_id(run_id, "summary@1", 1)
    server.wait_status(run_id, "paused")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    note = page.locator("#paused-in-child")
    expect(note).to_contain_text(f"Paused in child {child}: approve here or there")
    workers = page.locator("table").filter(has=page.locator(".child-run"))
    # Sending the parent back is done in the child: the parent's page offers no form for it.
    expect(page.locator("#reject")).to_have_count(0)
    line = workers.locator(f'.child-run[data-child="{child}"]')
    expect(line).to_contain_text("paused for approval")
    expect(line).to_contain_text(re.compile(r"cost \$[0-9.]+ · [1-9][0-9]* tokens"))
    spent = server.http.get(f"/api/runs/{run_id}/attempts").json()["costs"]["run"]
    assert spent["child_tokens"] > 0
    costs = page.get_by_role("table", name="Cost per phase and task")
    expect(costs.locator("thead")).to_contain_text("running child tokens")
    expect(costs.locator("tfoot")).to_contain_text(str(spent["child_tokens"]))
    expect(
        page.get_by_role("region", name="Timeline", exact=False).locator(".tl-child")
    ).to_contain_text("↳ summary")
    expect(page.locator("#g-node-summary.g-child")).to_have_attribute(
        "aria-label", "worker summary (pipeline checked, runs a child run), writes summary.md, "
        "final; last attempt running"
    )  # fmt: skip
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "child-parent.png"), full_page=True)
    line.get_by_role("link", name=child).click()
    crumb = page.get_by_role("navigation", name="Breadcrumb")
    expect(crumb).to_contain_text(f"parent {run_id}")
    expect(crumb).to_contain_text("task summary@1")
    expect(page.locator("#pauses-parent")).to_contain_text("approving here or there")
    expect(page.locator("#reject")).to_be_visible()  # the child's own review
    page.screenshot(path=str(SHOTS / "child-child.png"), full_page=True)
    crumb.get_by_role("link", name=run_id).click()
    expect(page.locator("#paused-in-child")).to_be_visible()

    page.goto(f"{server.url}/ui/#/")
    rows = page.locator("#runs tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-run", run_id)
    expect(rows.nth(1)).to_have_attribute("data-run", child)
    expect(rows.nth(1)).to_have_class("link child-row")
    expect(rows.nth(1)).to_contain_text("↳")
    page.get_by_label("hide child runs").check()
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_have_attribute("data-run", run_id)
    page.get_by_label("hide child runs").uncheck()
    expect(rows).to_have_count(2)

    page.goto(f"{server.url}/ui/#/runs/{run_id}")
    page.locator("#approve").click()
    expect(page.locator("h1 .pill")).to_have_text("delivered", timeout=30_000)
    expect(page.locator(f'.child-run[data-child="{child}"]')).to_contain_text("delivered")
    assert server.wait_status(child, "delivered")["status"] == "delivered"
    assert page.errors == []  # type: ignore[attr-defined]


WAITING = """
relay:
  phases:
    - id: hand
      workers:
        - {role: courier, pipeline: gate, final: true}
gate:
  phases:
    - id: open
      wait_for: {signal: go}
      workers:
        - {role: opener, model: sonnet, task: "Open {{ topic }}", final: true}
"""


def test_a_parent_waiting_in_its_child_takes_the_childs_signal(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """A parent waiting because its child waits for a signal says "waiting in child <id>"
    with what the child waits for, offers the signal form, and a signal sent from the
    parent's page reaches the child: both deliver."""
    server = make_server(workflows=[write_workflow(tmp_path, WAITING)])
    run_id = server.start_run("relay", "Doors")
    child = child_run_id(run_id, "courier@1", 1)
    server.wait_status(child, "waiting")
    server.wait_status(run_id, "waiting")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    note = page.locator("#waiting")
    expect(note).to_contain_text(f"Waiting in child {child}: waits for signal 'go'.")
    expect(note.get_by_role("link", name=child)).to_have_attribute("href", f"#/runs/{child}")
    page.locator("#signal-name").fill("go")
    page.locator("#send-signal").click()
    expect(page.locator("h1 .pill")).to_have_text("delivered", timeout=30_000)
    assert server.wait_status(child, "delivered")["status"] == "delivered"
    assert page.errors == []  # type: ignore[attr-defined]
