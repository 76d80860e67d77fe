"""Take the README's dashboard screenshots from a real server and Chromium.

    python docs/screenshots.py      # writes docs/img/dashboard-runs.png and dashboard-run.png
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    home = tempfile.mkdtemp(prefix="interlock-shots-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    port = free_port()
    examples = ROOT / "examples"
    for flow, name, topic in (("translate.yaml", "translate", "Durable workflows"),
                              ("research.json", "research", "FSA architecture"),
                              ("fanout.yaml", "article", "Message queues")):  # fmt: skip
        subprocess.run([sys.executable, "-m", "interlock", "--home", home, "run",
                        str(examples / flow), name, "--topic", topic],
                       env=env, check=True, capture_output=True)  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "interlock", "--home", home, "serve", "--port", str(port),
         "-w", str(examples / "translate.yaml"), "-w", str(examples / "research.json"),
         "-w", str(examples / "fanout.yaml")],
        env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{base}/api/runs", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 860})
            page.goto(f"{base}/ui/")
            page.wait_for_selector("tr.link")
            page.screenshot(path=str(ROOT / "docs" / "img" / "dashboard-runs.png"))
            page.click("text=translate-")
            page.wait_for_selector("text=Decisions", timeout=10_000)
            time.sleep(0.5)
            page.screenshot(path=str(ROOT / "docs" / "img" / "dashboard-run.png"), full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
