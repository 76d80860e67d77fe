"""Signals and waits killed (SIGKILL) at every point of their recording, then resumed: a wait's
due time is recorded once, a signal once, nothing lost, the run delivered with the data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.runtime.faults import WAIT_CRASH_POINTS

PIPELINE = """
crash:
  phases:
    - id: first
      delay: 0.5
      workers:
        - role: a
          command: ["sh", "-c", "echo A > {output}"]
    - id: second
      wait_for: {signal: go, timeout: 1h, schema: {type: object, required: [n]}}
      workers:
        - role: b
          final: true
          command: ["sh", "-c", "echo paid $0 > $1", "{{ signals.go.n }}", "{output}"]
"""


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI, armed to kill itself at `crash_at`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def events(home: Path, run_id: str) -> list[dict[str, object]]:
    """The run's events, in order (read from the ledger here: a CLI start costs seconds)."""
    app = Interlock(home)
    try:
        return [{"kind": e.kind, "at": e.at, "data": e.data} for e in app.events(run_id)]
    finally:
        app.close()


@pytest.mark.parametrize("point", WAIT_CRASH_POINTS)
def test_a_wait_or_signal_killed_anywhere_is_recorded_once(tmp_path: Path, point: str) -> None:
    """Killed while recording a wait, its end or a signal, the resumed run records each once,
    keeps the first due time, and delivers the signal's data."""
    flow = tmp_path / "crash.yaml"
    flow.write_text(PIPELINE)
    home = tmp_path / "home"
    run_id = "r"
    if point in ("after_record_wait", "after_end_wait"):
        first = cli(home, "run", str(flow), "crash", "-t", "x", "--run-id", "r", crash_at=point)
        assert first.returncode == -signal.SIGKILL, f"{point} was not reached: {first.stderr}"
        sent = cli(home, "signal", run_id, "go", "--data", '{"n": 7}', "--key", "k1", "--no-drive")
        assert sent.returncode == 0, sent.stderr
    else:
        submitted = cli(home, "submit", str(flow), "crash", "-t", "x")
        assert submitted.returncode == 0, submitted.stderr
        run_id = submitted.stdout.strip()
        first = cli(
            home, "signal", run_id, "go", "--data", '{"n": 7}', "--key", "k1", crash_at=point
        )
        assert first.returncode == -signal.SIGKILL, f"{point} was not reached: {first.stderr}"
    done = cli(home, "resume", run_id)
    assert done.returncode == 0, done.stdout + done.stderr
    history = events(home, run_id)
    kinds = [str(e["kind"]) for e in history]
    starts = [e["data"] for e in history if e["kind"] == "wait_started"]
    assert [(s["phase"], s["gate"]) for s in starts] == [("first", "delay"), ("second", "before")]  # type: ignore[index]
    assert kinds.count("wait_ended") == 2 and kinds.count("signal_received") == 1
    assert kinds.count("task_dispatched") == 2 and kinds[-2:] == ["delivered", "archived"]
    delay = next(e for e in history if e["kind"] == "wait_started")
    assert delay["data"]["until"] == pytest.approx(float(delay["at"]) + 0.5)  # type: ignore[arg-type,index]
    final = home / "archive" / run_id / "final.md"
    assert final.read_text() == "paid 7\n"
