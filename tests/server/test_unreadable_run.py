"""A server over a ledger in which one waiting run's history cannot be read: it starts, lists
every run (that one marked unreadable, with why), serves the others, and answers for that
run with the reason instead of failing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.server.conftest import ServerFactory

FLOW = """
w:
  phases:
    - id: one
      wait_for: {signal: go}
      workers:
        - {role: w, model: any, final: true, task: "Write."}
"""


def _waiting(home: Path, flow: Path, run_id: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    command = [sys.executable, "-m", "interlock", "--home", str(home), "run", str(flow), "w"]
    driver = subprocess.Popen(
        [*command, "-t", "x", "--run-id", run_id],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and driver.poll() is None
            if "wait_started" in _kinds(home, run_id):
                break
            time.sleep(0.1)
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=60)


def _kinds(home: Path, run_id: str) -> set[str]:
    """The kinds of `run_id`'s events (none while the ledger is being made)."""
    if not (home / "ledger.db").exists():
        return set()
    try:
        with sqlite3.connect(home / "ledger.db") as db:
            rows = db.execute("SELECT kind FROM events WHERE run_id = ?", (run_id,))
            kinds = {str(k) for (k,) in rows}
        db.close()
    except sqlite3.OperationalError:  # its tables are not made yet, or it is locked
        return set()
    return kinds


def test_one_unreadable_run_does_not_stop_the_server(
    tmp_path: Path, make_server: ServerFactory
) -> None:
    """`bad` holds an event with a field no interlock wrote: the server starts and leaves it
    alone, GET /api/runs lists `bad` (unreadable, with the event named) and `good`, the
    detail of `bad` answers 500 `damaged_history` with the reason, `good` answers 200."""
    home = tmp_path / "home"
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    _waiting(home, flow, "good")
    _waiting(home, flow, "bad")
    with sqlite3.connect(home / "ledger.db") as db:
        db.execute(
            "UPDATE events SET data = replace(data, '\"gate\"', '\"gatex\"') "
            "WHERE run_id = 'bad' AND kind = 'wait_started'"
        )
    db.close()
    server = make_server()
    listed = server.http.get("/api/runs")
    assert listed.status_code == 200, listed.text
    rows = {row["run_id"]: row for row in listed.json()}
    assert set(rows) == {"good", "bad"}
    assert "its history cannot be read at event" in rows["bad"]["unreadable"]
    assert "unreadable" not in rows["good"]
    assert rows["good"]["waiting"]["signal"] == "go"
    detail = server.http.get("/api/runs/bad")
    assert detail.status_code == 500, detail.text
    assert detail.json()["error"]["code"] == "damaged_history"
    assert server.http.get("/api/runs/good").status_code == 200
