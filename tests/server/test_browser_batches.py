"""Batches in real Chromium: the list, a batch's page kept live (progress, a per-row table
filtered by status and text, each row linking to its run, retry, cancel and export), and the
compare view of an experiment's variants with the diff of two of their runs."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

from playwright.sync_api import Browser, expect
from tests.server.browsing import browser, open_page, with_token
from tests.server.conftest import ServerFactory
from tests.server.helpers import SECRET, token

from interlock import Interlock
from interlock.core.batches import RowInputs
from interlock.core.loader import load_workflow
from interlock.workloads.batches import record_batch
from interlock.workloads.experiments import ExperimentRunner

__all__ = ["browser"]
SHOTS = Path(__file__).resolve().parent / "screenshots"

# Each row waits for the file GO; odd rows then fail until the file FLAG exists.
GATED = """\
score:
  inputs:
    n: {type: integer, required: true}
    region: north
  phases:
    - id: only
      workers:
        - role: w
          final: true
          command:
            - sh
            - -c
            - >-
              while [ ! -e GO ]; do sleep 0.05; done;
              [ -e FLAG ] || [ $(($1 % 2)) -eq 0 ] || exit 3; echo "Score: $1" > "$2"
            - sh
            - "{{ n }}"
            - "{output}"
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""

# A reviewer's score: n in the base; the variant doubles odd rows' scores.
REVIEW = """\
review:
  inputs:
    n: {type: integer, required: true}
  metrics:
    score: reviewer.score
    passed: reviewer.score >= 4
  phases:
    - id: write
      workers:
        - role: writer
          command: [sh, -c, 'echo "Draft $1" > "$2"', sh, "{{ n }}", "{output}"]
    - id: review
      workers:
        - role: reviewer
          final: true
          reads: [writer.md]
          command: [sh, -c, 'echo "Score: SCORE" > "$2"', sh, "{{ n }}", "{output}"]
          extract:
            score: {regex: "Score: ([0-9]+)", type: number}
"""


def test_a_batch_page_is_live_filterable_and_acts(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """A batch started over the API shows its rows running, then (without a reload) their
    ends: the counts, the cost, a row per input row; the table filters by status and by
    text, a row links to its run's page; Retry failed gives the failed rows new runs that
    are delivered; the CSV export downloads what the API exports; the list shows it."""
    flow = GATED.replace("GO", str(tmp_path / "go")).replace("FLAG", str(tmp_path / "flag"))
    (tmp_path / "score.yaml").write_text(flow)
    server = make_server(workflows=[tmp_path / "score.yaml"])
    rows = [{"topic": f"Survey of kelp {n}", "n": n} for n in range(1, 6)]
    rows.append({"topic": "Tide tables", "n": 6, "region": "south"})
    body = {"pipeline": "score", "rows": rows, "batch_id": "kelp", "concurrency": 2}
    assert server.http.post("/api/batches", json=body).status_code == 201
    page = open_page(browser, f"{server.url}/ui/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Batches").click()
    listed = page.locator("#batches tr[data-batch='kelp']")
    expect(listed).to_contain_text("score")
    listed.get_by_role("link", name="kelp").click()
    stats = page.locator("#batch-stats")
    expect(stats).to_contain_text("0/6done")
    expect(stats).to_contain_text("2running")
    table = page.get_by_role("table", name="Rows")
    expect(table.locator("tbody tr")).to_have_count(6)
    expect(table.locator("tr[data-row='3']")).to_contain_text("waiting")
    expect(page.locator("#batch-cancel")).to_be_enabled()
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "batch-running.png"))

    (tmp_path / "go").write_text("")  # the rows end: the page follows without a reload
    expect(stats).to_contain_text("6/6done", timeout=30_000)
    expect(stats).to_contain_text("3delivered")
    expect(stats).to_contain_text("3failed")
    expect(page.locator("h1 .pill")).to_have_text("failed")
    expect(page.locator("#batch-cancel")).to_be_disabled()
    status = page.get_by_role("combobox", name="Filter rows by status")
    status.select_option("failed")
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator("tbody tr").first).to_contain_text("exit")  # the row's failure
    status.select_option("")
    search = page.get_by_role(
        "searchbox", name="Search rows by topic, inputs, run id, values or failure"
    )
    search.fill("south")  # an input's value
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.locator("tbody tr")).to_contain_text("Tide tables")
    expect(table.locator("tbody tr")).to_contain_text("score=6")
    expect(page.locator("#rows-shown")).to_have_text("1 of 6 rows")
    search.fill("")
    expect(table.locator("tbody tr")).to_have_count(6)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "batch-page.png"), full_page=True)

    table.get_by_role("link", name="kelp-r2").click()
    expect(page).to_have_url(re.compile(r"#/runs/kelp-r2$"))
    expect(page.locator("h1 .pill")).to_have_text("delivered")
    page.go_back()
    expect(page.locator("#batch-stats")).to_contain_text("3failed")

    (tmp_path / "flag").write_text("")
    page.get_by_role("button", name="Retry failed (3)").click()
    expect(page.locator("#toast")).to_contain_text("3 failed row(s) given a new try")
    expect(page.locator("#batch-stats")).to_contain_text("6delivered", timeout=30_000)
    expect(table.locator("tr[data-row='1']")).to_contain_text("kelp-r1-t2")

    with page.expect_download() as download:
        page.get_by_role("button", name="CSV").click()
    assert download.value.suggested_filename == "kelp.csv"
    saved = Path(download.value.path()).read_text()
    assert saved == server.http.get("/api/batches/kelp/export?format=csv").text
    assert saved.startswith("row,status,run_id,try,cost_usd,tokens,topic,input.n")
    assert page.errors == []  # type: ignore[attr-defined]


def test_cancel_from_the_page_and_a_read_only_token(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """With a read-only token the batch's actions are disabled and say why; with an operate
    token Cancel batch, clicked twice, cancels the rows not started and the runs in flight."""
    flow = GATED.replace("GO", str(tmp_path / "go")).replace("FLAG", str(tmp_path / "flag"))
    (tmp_path / "score.yaml").write_text(flow)
    server = make_server(workflows=[tmp_path / "score.yaml"], auth_secret=SECRET)
    act = {"Authorization": f"Bearer {token(['read', 'operate'])}"}
    rows = [{"topic": f"r{n}", "n": n} for n in range(1, 5)]
    body = {"pipeline": "score", "rows": rows, "batch_id": "stop", "concurrency": 1}
    assert server.http.post("/api/batches", json=body, headers=act).status_code == 201
    page = open_page(browser, f"{server.url}/ui/#/batches/stop")
    with_token(page, token(["read"]), asked=True)
    expect(page.locator("#batch-stats")).to_contain_text("1running")
    cancel = page.locator("#batch-cancel")
    expect(cancel).to_be_disabled()
    expect(cancel).to_have_attribute("title", re.compile("read scope only"))
    expect(page.locator("#batch-retry")).to_be_disabled()
    with_token(page, token(["read", "operate"]))
    expect(cancel).to_be_enabled()
    cancel.click()
    expect(cancel).to_have_text("Confirm: cancel 4 row(s)")
    cancel.click()
    expect(page.locator("#toast")).to_contain_text("3 row(s) not started, 1 run(s) stopped")
    expect(page.locator("h1 .pill")).to_have_text("cancelled", timeout=30_000)
    expect(page.locator("#batch-stats")).to_contain_text("4cancelled")
    assert page.errors == []  # type: ignore[attr-defined]


def run_experiment(home: Path, folder: Path) -> None:
    """Record and run experiment `rv` (variants base and double) of four rows in `home`."""
    (folder / "review.yaml").write_text(REVIEW.replace("SCORE", "$1"))
    doubled = REVIEW.replace("SCORE", "$(( $1 % 2 ? $1 * 2 : $1 ))")
    (folder / "double.yaml").write_text(doubled)
    app = Interlock(home)
    base = load_workflow(folder / "review.yaml").get("review")
    variant = load_workflow(folder / "double.yaml").get("review")
    rows = [RowInputs(number=n, topic=f"Article {n}", inputs={"n": n}) for n in (1, 2, 3, 4)]
    record_batch(
        app,
        base,
        rows,
        batch_id="rv",
        inputs_file="articles.csv",
        concurrency=2,
        max_cost_usd=None,
        now=time.time(),
        variants=[("double", variant)],
    )
    # In a thread of its own: the browser's driver runs an event loop in this one.
    worker = threading.Thread(
        target=asyncio.run, args=(ExperimentRunner(app, ["rv", "rv-double"]).run(),)
    )
    worker.start()
    worker.join(120)
    app.close()


def test_the_compare_view_and_the_diff_of_two_runs(
    browser: Browser, make_server: ServerFactory, tmp_path: Path
) -> None:
    """An experiment's compare view: per variant rows delivered, cost, tokens, latencies,
    the score's mean and median and the pass rate, the best marked; the rows that differ
    most by score, each with its two runs and a link to their diff, which shows the
    reviewer's output changed and how; a batch's page opens the comparison with another."""
    run_experiment(tmp_path / "home", tmp_path)
    server = make_server(workflows=[tmp_path / "review.yaml"])
    page = open_page(browser, f"{server.url}/ui/#/batches")
    variant = page.locator("#batches tr[data-batch='rv-double']")
    expect(variant).to_contain_text("variant double of rv")
    variant.get_by_role("link", name="rv", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/compare/rv$"))
    table = page.get_by_role("table", name="Variants")
    expect(table.locator("thead")).to_contain_text("passed: pass rate")
    expect(table.locator("thead")).to_contain_text("score: median")
    base = table.locator("tr[data-variant='base']")
    double = table.locator("tr[data-variant='double']")
    expect(base).to_contain_text("4/4")
    expect(base).to_contain_text("25%")  # scores 1 2 3 4: one passes
    expect(double).to_contain_text("50%")  # scores 2 2 6 4: two pass
    expect(double.locator("td.best")).to_have_count(3)  # the higher mean, median, pass rate
    differences = page.get_by_role("table", name="Rows that differ most")
    expect(differences.locator("tbody tr")).to_have_count(2)  # rows 1 and 3
    expect(differences.locator("tbody tr").first).to_contain_text("rv-double-r3")
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "compare-view.png"), full_page=True)

    differences.locator("tbody tr").first.get_by_role("link", name="diff the two runs").click()
    expect(page).to_have_url(re.compile(r"#/diff/rv-r3/rv-double-r3$"))
    task = page.locator("#diff-tasks tr[data-task='reviewer@1']")
    expect(task).to_contain_text("changed")
    expect(task).to_contain_text("score: 3 → 6")
    expect(page.locator("#diff-tasks tr[data-task='writer@1']")).to_contain_text("reused")
    expect(page.locator(".udiff .add")).to_contain_text("+Score: 6")
    page.screenshot(path=str(SHOTS / "diff-view.png"), full_page=True)
    page.go_back()
    expect(table).to_be_visible()

    page.goto(f"{server.url}/ui/#/batches/rv-double")  # two batches, from a batch's page
    page.get_by_role("combobox", name="Compare with").select_option("rv")
    expect(page).to_have_url(re.compile(r"#/compare/rv-double/rv$"))
    expect(page.locator("#compare-title")).to_have_text("rv-double vs rv")
    expect(table.locator("tbody tr")).to_have_count(2)
    assert page.errors == []  # type: ignore[attr-defined]
