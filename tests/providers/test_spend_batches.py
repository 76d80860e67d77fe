"""A batch whose rows' calls wait on a spend cap says so, in `batch status` and in the
driver's own progress, instead of looking like rows running with a climbing ETA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .conftest import API_KEY
from .fake_llm_server import FakeServer

WORKFLOW = """\
ask:
  phases:
    - id: answer
      workers:
        - {role: answerer, final: true, model: m, task: "Answer about {{ topic }}"}
"""


def _project(tmp_path: Path, server: FakeServer) -> dict[str, str]:
    """A one-call pipeline whose calls (USD 0.0078 each at worst) fit the daily cap once."""
    (tmp_path / "interlock.toml").write_text(f"""
[providers.local]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_API_KEY"

[models.m]
provider = "local"
model = "gpt-test"
max_output_tokens = 500
input_price_per_mtok = 3.0
output_price_per_mtok = 15.0

[limits]
max_cost_usd_per_day = 0.01
""")
    (tmp_path / "wf.yaml").write_text(WORKFLOW)
    (tmp_path / "rows.csv").write_text("topic\none\ntwo\nthree\nfour\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env.update(INTERLOCK_HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    env.update(FAKE_API_KEY=API_KEY, PYTHONUNBUFFERED="1", COLUMNS="200")
    return env


def _status(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "interlock", "batch", "status", "cap", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_rows_waiting_on_a_spend_cap_are_shown_waiting_for_it(
    tmp_path: Path, server: FakeServer
) -> None:
    """The first row delivered spends most of the cap; the two in flight then have calls
    waiting on it: `batch status` shows them
    `waiting: spend cap` with the cap's words under each, its JSON says so per row, and the driver's
    progress line names the cap and gives no ETA."""
    server.state.output_tokens = 400  # an answer under the 500-token limit: delivered
    env = _project(tmp_path, server)
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(
        [sys.executable, "-m", "interlock", "batch", "wf.yaml", "--inputs", "rows.csv",
         "--batch-id", "cap", "--concurrency", "2"],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        shown = ""
        while time.monotonic() < deadline:
            shown = _status(env, tmp_path) if (tmp_path / "home").exists() else ""
            if shown.count("why: waiting: spend cap 'daily'") == 2:
                break
            time.sleep(0.3)
        assert shown.count("why: waiting: spend cap 'daily' (USD 0.01)") == 2, shown
        assert "2 running (2 waiting: spend cap 'daily'" in shown
        table = [line.split() for line in shown.splitlines() if line.strip()[:1].isdigit()]
        statuses = sorted(" ".join(cells[3:-1]) for cells in table)
        assert statuses == ["delivered", "waiting", "waiting: spend cap", "waiting: spend cap"]
        body = json.loads(_status(env, tmp_path, "--json"))
        waits = [r.get("waiting") or "" for r in body["rows"]]
        assert sum(w.startswith("waiting: spend cap 'daily'") for w in waits) == 2
        capped = "2 running (2 waiting: spend cap 'daily' (USD 0.01)"
        while time.monotonic() < deadline and capped not in (tmp_path / "driver.log").read_text():
            time.sleep(0.3)
        said = (tmp_path / "driver.log").read_text().splitlines()
        assert [line for line in said if capped in line][-1].endswith("ETA ?"), said
    finally:
        driver.kill()
        driver.wait()
        log.close()
