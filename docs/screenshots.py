"""Take the README's and docs' dashboard screenshots from a real server and Chromium.

    python docs/screenshots.py      # writes docs/img/dashboard-*.png

Three example runs are made with the CLI, then a server drives a small demo pipeline (a
command that fails once and is retried, a model worker on the offline provider, a pause that
a person approves after a moment) so that the timeline has something to show, and a run
whose child run waits for approval (the run page's "paused in child" view).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update"]  # fmt: skip
DEMO = """
demo:
  description: Gather notes, draft with a model, pause for a person, publish
  inputs:
    audience: {default: engineers, description: Who reads the report}
    sections: {default: 3, description: How many sections}
    draft_only: {default: false}
    owner: {required: true, description: Who signs it off}
  budget: {max_cost_usd: 1}
  phases:
    - id: gather
      workers:
        - role: collector
          retries: 1
          backoff: {initial: 0.4}
          command:
            - "{python}"
            - "-c"
            - >-
              import os, sys, time; time.sleep(0.6);
              sys.exit('source timed out') if os.environ['INTERLOCK_ATTEMPT'] == '1'
              else print('notes: tides, kelp, currents')
        - role: checker
          command: ["{python}", "-c", "import time; time.sleep(0.9); print('sources ok')"]
    - id: draft
      pause_after: true
      workers:
        - role: writer
          model: sonnet
          reads: [collector.md, checker.md]
          task: "Draft a report on {{ topic }} for {{ audience }}."
    - id: publish
      workers:
        - role: publisher
          command: ["{python}", "-c", "import time; time.sleep(0.4); print('# Report')"]
          reads: [writer.md]
          final: true
delegate:
  description: Gather notes, then hand the report to a child pipeline that a person checks
  phases:
    - id: gather
      workers:
        - role: collector
          command: ["{python}", "-c", "import time; time.sleep(0.5); print('notes: tides')"]
    - id: write
      workers:
        - {role: report, pipeline: reviewed, task: "Report on {{ topic }}", final: true}
reviewed:
  description: Draft with a model, pause for a person, publish
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: writer, model: sonnet, task: "Draft a report on {{ topic }}."}
    - id: publish
      workers:
        - role: publisher
          command: ["{python}", "-c", "print('# Report')"]
          reads: [writer.md]
          final: true
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"{base}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def wait_for(base: str, run_id: str, *statuses: str) -> None:
    for _ in range(1200):  # a loaded machine can take a while
        if call(base, f"/api/runs/{run_id}")["status"] in statuses:
            return
        time.sleep(0.1)
    raise RuntimeError(f"run {run_id} never reached {statuses}")


def settle(page: Page) -> None:
    page.wait_for_load_state("networkidle")
    time.sleep(0.6)


def main() -> None:
    home = tempfile.mkdtemp(prefix="interlock-shots-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    port = free_port()
    examples = ROOT / "examples"
    demo = Path(home) / "demo.yaml"
    demo.write_text(DEMO)
    for flow, name, topic in (("translate.yaml", "translate", "Durable workflows"),
                              ("research.json", "research", "FSA architecture"),
                              ("fanout.yaml", "article", "Message queues")):  # fmt: skip
        subprocess.run([sys.executable, "-m", "interlock", "--home", home, "run",
                        str(examples / flow), name, "--topic", topic],
                       env=env, check=True, capture_output=True)  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "interlock", "--home", home, "serve", "--port", str(port),
         "-w", str(examples / "translate.yaml"), "-w", str(examples / "research.json"),
         "-w", str(examples / "fanout.yaml"), "-w", str(demo)],
        env=env, cwd=home,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90  # a loaded machine starts the server slowly
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/runs", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start: see its output above") from None
                time.sleep(0.2)
        run = call(base, "/api/runs", {"pipeline": "demo", "topic": "Coastal survey",
                                       "inputs": {"owner": "ana"}})  # fmt: skip
        demo_id = run["run_id"]
        wait_for(base, demo_id, "paused")
        time.sleep(1.5)  # a person reads the draft
        call(base, f"/api/runs/{demo_id}/approve", {"message": "Looks right"})
        wait_for(base, demo_id, "delivered")
        # A parent run held by its child run's pause, left paused for the child-run pictures.
        parent = call(base, "/api/runs", {"pipeline": "delegate", "topic": "Harbour survey"})
        parent_id = parent["run_id"]
        wait_for(base, parent_id, "paused")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 860})
            page.goto(f"{base}/ui/")
            page.wait_for_selector("tr.link")
            page.select_option("#start-pipeline", "demo")
            page.fill("#start-topic", "Harbour report")
            settle(page)
            page.screenshot(path=str(IMG / "dashboard-runs.png"))
            start_panel = page.locator("section:has(#start-title)")
            start_panel.screenshot(path=str(IMG / "dashboard-start.png"))
            page.click("text=translate-")
            page.wait_for_selector("#graph")
            settle(page)
            page.screenshot(path=str(IMG / "dashboard-run.png"), full_page=True)
            page.locator("section:has(#graph)").screenshot(path=str(IMG / "dashboard-graph.png"))
            page.goto(f"{base}/ui/#/runs/{demo_id}")
            page.wait_for_selector("#timeline")
            settle(page)
            timeline = page.locator("section:has(#timeline)")
            timeline.screenshot(path=str(IMG / "dashboard-timeline.png"))
            page.locator(".tl-bar.o-done").nth(2).click()  # the model's attempt
            page.wait_for_selector("#attempt-user")
            settle(page)
            page.screenshot(path=str(IMG / "dashboard-attempt.png"))
            family = browser.new_page(viewport={"width": 1360, "height": 860})
            family.goto(f"{base}/ui/#/runs/{parent_id}")
            family.wait_for_selector("#paused-in-child")
            settle(family)
            family.screenshot(path=str(IMG / "dashboard-child.png"), full_page=True)
            dark = browser.new_page(viewport={"width": 1360, "height": 860}, color_scheme="dark")
            dark.goto(f"{base}/ui/#/runs/{demo_id}")
            dark.wait_for_selector("#timeline")
            settle(dark)
            dark.screenshot(path=str(IMG / "dashboard-dark.png"))
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
