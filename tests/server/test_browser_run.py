"""The run page in real Chromium: timeline, attempt detail, graph, costs, inputs and controls."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Route, expect
from playwright.sync_api import Error as PlaywrightError
from tests.cli.test_iterate import FAILING
from tests.server.browsing import browser, open_page, with_token
from tests.server.conftest import ServerFactory
from tests.server.helpers import HOLD, SECRET, token, write_workflow
from tests.server.test_insight import FLOW

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"


def test_timeline_bars_open_attempt_detail_by_keyboard(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """The timeline is a labelled region with a bar per attempt (a retried one and its
    successful retry in one row); Enter on a bar opens its detail with the command's stderr,
    a model attempt's detail shows its exact prompt, tokens and tool transcript, and Escape
    closes it; the cost table adds up the tokens and folds a phase's tasks away."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("flaky", "Tide tables")
    server.wait_status(run_id, "delivered")
    attempts = server.http.get(f"/api/runs/{run_id}/attempts").json()["attempts"]
    author = next(a for a in attempts if a["role"] == "author")
    prompts = server.service.home.run_dir(run_id) / "prompts"
    (prompts / "author@1.1.tools.md").write_text(
        "# Turn 1: model (tool_calls)\n\n## Call `lookup`\n"
    )
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    timeline = page.get_by_role("region", name="Timeline of 3 attempts", exact=False)
    expect(timeline).to_be_visible()
    shaky = timeline.get_by_role("listitem").filter(has_text="shaky")
    expect(shaky.locator(".tl-bar")).to_have_count(2)
    expect(shaky.locator(".tl-bar.o-retried")).to_have_attribute(
        "aria-label", re.compile(r"^shaky@1 attempt 1: failed, retried, \d+ ms$")
    )
    first = shaky.locator(".tl-bar").first
    first.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="shaky@1 · attempt 1")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#attempt-stderr")).to_contain_text("first try fails")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(first).to_be_focused()  # the keyboard is back where it was
    page.get_by_role("button", name="author@1 attempt 1", exact=False).click()
    detail = page.get_by_role("dialog", name="author@1 · attempt 1")
    expect(detail.locator("#attempt-user")).to_contain_text("Write about Tide tables")
    expect(detail).to_contain_text("in ·")
    expect(detail.locator("#attempt-answer")).not_to_be_empty()
    expect(detail.get_by_role("region", name="Tool calls")).to_contain_text("Call `lookup`")
    page.keyboard.press("Escape")
    costs = page.get_by_role("table", name="Cost per phase and task")
    expect(costs.locator("tfoot")).to_contain_text(str(author["tokens"]["input_tokens"]))
    expect(costs).to_contain_text("shaky@1")
    page.get_by_role("button", name="▾ try").click()  # folds the phase's tasks away
    expect(costs).not_to_contain_text("shaky@1")
    expect(page.get_by_role("button", name="▸ try")).to_have_attribute("aria-expanded", "false")
    page.get_by_role("button", name="author@1 attempt 1", exact=False).click()
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "attempt.png"))
    page.keyboard.press("Escape")
    page.screenshot(path=str(SHOTS / "timeline.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def test_graph_shows_path_loop_count_and_opens_worker(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """The graph region draws every phase and worker, marks the loop edge taken once with its
    condition, and a worker node reached by keyboard opens its last attempt; in dark mode the
    graph's text stays light on the dark panel."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("loop", "Loops")
    server.wait_status(run_id, "delivered")
    deadline = time.time() + 15  # and moved to the archive: no live update redraws the graph
    while not server.http.get(f"/api/runs/{run_id}").json().get("archived"):
        assert time.time() < deadline, "the delivered run was never archived"
        time.sleep(0.05)
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}", dark=True)
    graph = page.get_by_role("region", name="Graph of pipeline loop", exact=False)
    expect(graph).to_be_visible()
    expect(graph.locator(".g-phase")).to_have_count(4)  # three phases and the end
    expect(graph.locator(".g-flow.g-taken")).to_have_count(4)
    rules = graph.get_by_role("list", name="next rules")
    times = "\N{MULTIPLICATION SIGN}"
    expect(rules).to_contain_text(
        f"review → draft if visits.draft < 2 (at most 2 visits) · taken 1{times}"
    )
    loop = graph.locator(".g-label.g-taken").filter(has_text="visits.draft < 2")
    expect(loop).to_contain_text(f"(max 2) · 1{times}")
    node = graph.get_by_role("button", name="worker reviewer", exact=False)
    node.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog", name="reviewer@2 · attempt 1")).to_be_visible()
    page.keyboard.press("Escape")
    # The dark theme's text colour; retried, since a live update may redraw the graph (a
    # title read while replaced has no computed style).
    expect(graph.locator(".g-title").first).to_have_css("fill", "rgb(223, 228, 238)")
    SHOTS.mkdir(exist_ok=True)
    for last in (False, False, True):  # a redraw while it is taken detaches the element
        try:
            graph.screenshot(path=str(SHOTS / "graph-dark.png"))
            break
        except PlaywrightError as exc:
            if last or "not attached" not in str(exc):
                raise
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
def test_review_controls_edit_reject_approve_rerun(
    browser: Browser, make_server: ServerFactory, auth: bool
) -> None:
    """At a pause the draft is edited in place, the run is sent back to its phase with
    feedback (typed text surviving the redraws while it works), approved with a note once it
    pauses again, rerun from its last phase (which reuses the draft) and forked with a new
    topic (which reuses nothing): with auth on and off."""
    HOLD.set()
    server = make_server(auth_secret=SECRET) if auth else make_server()
    operator = token(["read", "operate"])
    headers = {"Authorization": f"Bearer {operator}"} if auth else {}
    started = server.http.post(
        "/api/runs", json={"pipeline": "review", "topic": "Reefs"}, headers=headers
    )
    run_id = started.json()["run_id"]
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    if auth:
        with_token(page, operator, asked=True)
    expect(page.locator("h1 .pill")).to_have_text("paused")
    page.click("#edit-output")
    expect(page.locator("#edit-text")).to_be_focused()
    page.fill("#edit-text", "# Draft\n\nEdited by hand.\n")
    page.fill("#edit-note", "ton plus sobre, déjà relu")  # not ASCII: no header can carry it
    page.click("#edit-save")
    expect(page.locator("#output")).to_contain_text("Edited by hand.")
    page.get_by_role("button", name="drafter@1 attempt 1", exact=False).click()
    expect(page.locator("#attempt-dialog")).to_contain_text("ton plus sobre, déjà relu")
    page.keyboard.press("Escape")
    page.select_option("#reject-to", "draft")
    page.fill("#feedback", "Shorter, please")
    page.click("#reject")
    expect(page.locator("#trace")).to_contain_text("sent back to draft by")
    expect(page.locator("#trace")).to_contain_text("Shorter, please")
    expect(page.locator(".tl-row .tl-bar")).to_have_count(2)  # the draft's second visit
    expect(page.locator("h1 .pill")).to_have_text("paused")
    expect(page.locator("#feedback")).to_have_value("")  # sent, so cleared
    page.click("#note")
    page.keyboard.type("Good now")
    expect(page.locator("#note")).to_have_value("Good now")
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"review-{auth}.png"), full_page=True)
    page.click("#approve")
    expect(page.locator("h1 .pill")).to_have_text("delivered")
    expect(page.locator("#trace")).to_contain_text("Good now")
    page.select_option("#rerun-from", "edit")
    page.click("#rerun")
    expect(page).not_to_have_url(re.compile(f"{run_id}$"))
    expect(page.locator("h1 .pill")).to_have_text(re.compile("paused|delivered"))
    expect(page.locator(".tl-bar.o-reused")).to_have_count(1)
    page.goto(f"{server.url}/ui/#/runs/{run_id}")
    page.fill("#rerun-topic", "Reefs, a fork")  # a new topic: nothing matches, all runs again
    page.click("#rerun")
    expect(page.get_by_text("Reefs, a fork", exact=True).first).to_be_visible()  # a toast may too
    expect(page.locator(".tl-bar.o-reused")).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
def test_waiting_run_shows_its_wait_and_takes_a_signal(
    browser: Browser, make_server: ServerFactory, auth: bool
) -> None:
    """A run waiting for a signal says so (status, phase, which signal); bad JSON data is
    refused in the page, data the schema refuses gets the server's message, and a good
    signal sent from the form lets the run deliver, its wait a shaded span of the timeline;
    a read-only token sees no signal form."""
    server = make_server(auth_secret=SECRET) if auth else make_server()
    operator = token(["read", "operate"])
    headers = {"Authorization": f"Bearer {operator}"} if auth else {}
    started = server.http.post(
        "/api/runs", json={"pipeline": "signalled", "topic": "Parcel"}, headers=headers
    )
    run_id = started.json()["run_id"]
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    if auth:
        with_token(page, token(["read"]), asked=True)
        expect(page.locator("h1 .pill")).to_have_text("waiting")
        expect(page.locator("#send-signal")).to_have_count(0)
        with_token(page, operator)
    expect(page.locator("h1 .pill")).to_have_text("waiting")
    expect(page.locator("#waiting")).to_contain_text("before phase ship for signal “payment”")
    expect(page.locator("#signal-name")).to_have_value("payment")
    page.fill("#signal-data", "{not json")
    page.click("#send-signal")
    expect(page.locator("#toast")).to_contain_text("not JSON")
    page.fill("#signal-data", '{"currency": "EUR"}')
    page.click("#send-signal")
    expect(page.locator("#toast")).to_contain_text("amount")
    page.fill("#signal-data", '{"amount": 12}')
    page.click("#send-signal")
    expect(page.locator("h1 .pill")).to_have_text("delivered")
    expect(page.locator(".tl-pause.tl-wait")).to_have_count(1)
    assert page.errors == []  # type: ignore[attr-defined]


UNNAMED = re.compile(
    r"^\s*- (button|textbox|combobox|checkbox|link|searchbox|spinbutton)\s*(\[.*\])?:?\s*$"
)
CONTRAST = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 4).map(Number);
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  const back = (e) => {
    for (; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length < 4 || c[3] > 0.9) return c;
    }
    return [255, 255, 255];
  };
  const worst = {};
  const texts = ["body", "h1", "h2", ".muted", ".tl-label", ".pill", "th", "td", ".warn", "code"];
  for (const sel of [...texts, "button"]) {
    for (const e of document.querySelectorAll(sel)) {
      if (!e.offsetParent || !e.textContent.trim()) continue;
      const a = lum(rgb(getComputedStyle(e).color)), b = lum(back(e));
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      worst[sel] = Math.min(worst[sel] || 99, ratio);
    }
  }
  return worst;
}"""


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_keyboard_reaches_every_control_with_a_name_and_text_is_readable(
    browser: Browser, make_server: ServerFactory, dark: bool
) -> None:
    """On a paused run every control is reached with Tab alone (approve, note, cancel, the
    send-back form, output tabs, edit, the timeline's bars, the graph's workers), no button,
    field or link lacks an accessible name, and text contrasts with its background at 4.5:1
    or more (3:1 for the bold status pills), in light and dark mode."""
    server = make_server()
    run_id = server.start_run("review", "Reachable")
    server.wait_status(run_id, "paused")
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}", dark=dark)
    expect(page.locator(".g-node[role=button]")).to_have_count(1)
    reached: set[str] = set()
    for _ in range(60):
        page.keyboard.press("Tab")
        reached.add(
            page.evaluate(
                "(() => { const e = document.activeElement;"
                " return e.id || e.className.baseVal || e.className || e.tagName; })()"
            )
        )
    for wanted in ("note", "approve", "cancel", "reject-to", "feedback", "reject", "edit-output"):
        assert wanted in reached, (wanted, reached)
    assert "g-node-drafter" in reached and any("tl-bar" in r for r in reached), reached
    snapshot = page.locator("body").aria_snapshot()
    unnamed = [line for line in snapshot.splitlines() if UNNAMED.match(line)]
    assert unnamed == [], unnamed
    for selector, ratio in page.evaluate(CONTRAST).items():
        assert ratio >= (3 if selector == ".pill" else 4.5), (selector, ratio)
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("held", ["events", "graph"])
def test_answers_for_a_run_page_left_behind_do_not_touch_the_next_page(
    browser: Browser, make_server: ServerFactory, tmp_path: Path, held: str
) -> None:
    """A run page's requests still in flight when the person goes back to the runs list are
    dropped when they answer: the list stays on screen and no script error is raised (the
    events used to be pushed onto the list page's state, the run drawn over the list)."""
    server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
    run_id = server.start_run("flaky", "Tide tables")
    server.wait_status(run_id, "delivered")
    page = open_page(browser, f"{server.url}/ui/#/")
    expect(page.locator("#runs tr")).to_have_count(1)
    waiting: list[Route] = []
    page.route(f"**/api/runs/{run_id}/{held}", lambda route: waiting.append(route))
    page.evaluate(f"location.hash = '#/runs/{run_id}'")
    deadline = time.monotonic() + 15
    while not waiting:
        assert time.monotonic() < deadline, f"the run page never asked for its {held}"
        page.wait_for_timeout(50)
    page.evaluate("location.hash = '#/'")
    expect(page.locator("#runs tr")).to_have_count(1)
    waiting[0].continue_()
    page.wait_for_timeout(500)  # the answer arrives and is handled (or dropped)
    expect(page.locator("#runs tr")).to_have_count(1)
    expect(page.locator("h1 .pill")).to_have_count(0)  # no run drawn over the list
    assert page.errors == []  # type: ignore[attr-defined]


def test_run_page_says_which_calls_its_cost_leaves_out(
    browser: Browser,
    make_server: ServerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model with no known price (here a provider's own name for it, behind a local
    OpenAI-compatible server): the run's cost is marked `+ unpriced` and a note names the
    model and the fix; the budget's warning says it cannot see those calls."""
    import threading

    from tests.providers.fake_llm_server import FakeServer, FakeState

    fake = FakeServer(FakeState(api_key="sk-unpriced-0123456789", models={"m"}, reply=["ok"]))
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("UNPRICED_KEY", "sk-unpriced-0123456789")
        (tmp_path / "interlock.toml").write_text(
            f'[providers.local]\nkind = "openai"\nbase_url = "{fake.url}/v1"\n'
            'api_key_env = "UNPRICED_KEY"\n\n[models.sonnet]\nprovider = "local"\nmodel = "m"\n'
        )
        server = make_server(workflows=[write_workflow(tmp_path, FLOW)])
        run_id = server.start_run("flaky", "Tide tables")
        server.wait_status(run_id, "delivered")
        page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
        expect(page.locator(".stats")).to_contain_text("$0 + unpriced")
        note = page.locator("#unpriced")
        expect(note).to_contain_text("leaves out the calls to model 'sonnet'")
        expect(note).to_contain_text("[models.sonnet] of interlock.toml")
        expect(page.locator(".warn").filter(has_text="max_cost_usd cannot see")).to_be_visible()
        page.screenshot(path=str(SHOTS / "unpriced.png"))
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        fake.state.stopping.set()
        fake.shutdown()
        fake.server_close()


def test_run_page_says_a_failing_run_waits_for_its_running_tasks(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """A task failed for good while a sibling runs: the run page says the run fails once the
    sibling has ended and why, then shows the failure with the sibling's output kept."""
    gate = tmp_path / "gate"  # `slow` runs until the page has shown the run failing
    server = make_server(workflows=[write_workflow(tmp_path, FAILING.replace("GATE", str(gate)))])
    run_id = server.start_run("fails", "t")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.http.get(f"/api/runs/{run_id}").json().get("failing"):
            break
        time.sleep(0.05)
    page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
    note = page.locator("#failing")
    try:
        expect(note).to_contain_text("Failing: task broken@1 failed for good")
        expect(note).to_contain_text("once slow@1 has ended, so that what was paid for is kept")
        page.screenshot(path=str(SHOTS / "failing.png"))
    finally:
        gate.touch()
    server.wait_status(run_id, "failed")
    expect(note).to_be_hidden()
    expect(page.locator(".warn.failure")).to_contain_text("Failed: task broken@1")
    assert (
        server.http.get(f"/api/runs/{run_id}").json()["phases"][0]["workers"]["slow"]["output"]
        == "slow.md"
    )
    assert page.errors == []  # type: ignore[attr-defined]


ESTIMATED_FLOW = """
estimate:
  phases:
    - id: write
      workers:
        - {role: writer, model: sonnet, final: true, task: "Write about {{ topic }}"}
"""


def test_run_page_marks_costs_a_server_did_not_report_as_estimated(
    browser: Browser,
    make_server: ServerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local server whose stream reports no usage: its tokens are counted at four
    characters a token, and the run page says so (`~` and "estimated" on the run's cost and
    tokens, on the cost table's rows, and a note under it) instead of stating them as counts."""
    import threading

    from tests.providers.fake_llm_server import FakeServer, FakeState, Fault

    fake = FakeServer(FakeState(api_key="sk-estimate-0123456789", models={"m"}, reply=["ok"]))
    fake.fail_next(Fault(no_usage=True))
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("ESTIMATE_KEY", "sk-estimate-0123456789")
        (tmp_path / "interlock.toml").write_text(
            f'[providers.local]\nkind = "openai"\nbase_url = "{fake.url}/v1"\n'
            'api_key_env = "ESTIMATE_KEY"\n\n[models.sonnet]\nprovider = "local"\nmodel = "m"\n'
            "input_price_per_mtok = 1000.0\noutput_price_per_mtok = 1000.0\n"
        )
        server = make_server(workflows=[write_workflow(tmp_path, ESTIMATED_FLOW)])
        run_id = server.start_run("estimate", "Tide tables")
        server.wait_status(run_id, "delivered")
        costs = server.http.get(f"/api/runs/{run_id}/attempts").json()["costs"]
        assert costs["run"]["estimated"] and costs["tasks"]["writer@1"]["estimated"]
        page = open_page(browser, f"{server.url}/ui/#/runs/{run_id}")
        stats = page.locator(".stats")
        expect(stats).to_contain_text("cost (estimated)")
        expect(stats).to_contain_text("tokens (estimated)")
        expect(stats.locator(".stat").filter(has_text="cost (estimated)")).to_contain_text("~$")
        table = page.get_by_role("table", name="Cost per phase and task")
        expect(table.locator("tfoot")).to_contain_text("~$")
        expect(table.locator("tfoot")).to_contain_text("~89")  # its tokens, estimated too
        expect(page.locator("#cost-estimated")).to_contain_text("~: estimated")
        assert page.errors == []  # type: ignore[attr-defined]
        # The runs list marks the run's cost too, from its listed row (`estimated`).
        listed = server.http.get("/api/runs").json()
        assert [r["estimated"] for r in listed if r["run_id"] == run_id] == [True]
        runs = open_page(browser, f"{server.url}/ui/")
        expect(runs.locator(f'#runs tr[data-run="{run_id}"] .run-cost')).to_contain_text("~$")
        expect(runs.locator(f'#runs tr[data-run="{run_id}"]')).to_contain_text("~90")
        assert runs.errors == []  # type: ignore[attr-defined]
    finally:
        fake.state.stopping.set()
        fake.shutdown()
        fake.server_close()
