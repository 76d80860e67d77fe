"""Hung workers, results that arrive too late, and approvals sent twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psutil

from interlock import Interlock, register
from interlock.core import events as ev
from interlock.errors import UsageError
from interlock.runtime.executors import TaskContext
from interlock.runtime.orchestrator import Settings
from interlock.runtime.reports import Report

from .helpers import definition, history_problems, kinds

SETTINGS = Settings(heartbeat=0.05, lease_ttl=5)


def _marked_processes(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_hung_command_is_killed_with_its_children_and_leaves_no_orphan(tmp_path: Path) -> None:
    """A command that hangs (and forks a child that hangs too) times out on every attempt;
    the run fails, and no process of either attempt survives."""
    marker = f"hang-{uuid.uuid4().hex}"
    script = tmp_path / "hang.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
        "time.sleep(120)\n"
    )
    flow = definition(f"""
    p:
      phases:
        - id: one
          workers:
            - role: sleeper
              command: [{json.dumps(sys.executable)}, {json.dumps(str(script))}, {marker}]
              timeout: 0.5
              grace: 0.5
              retries: 1
              backoff: {{initial: 0}}
              final: true
    """)
    app = Interlock(tmp_path / "home", settings=SETTINGS)
    state = app.run(flow, topic="hang")
    assert state.status.value == "failed"
    assert kinds(app, state.run_id).count("task_timed_out") == 2
    assert history_problems(app, state.run_id, flow) == []
    _gone, alive = psutil.wait_procs(_marked_processes(marker), timeout=5)
    assert alive == [], f"orphans left behind: {alive}"
    app.close()


LATE: dict[str, object] = {}


async def _second_attempt_wins(context: TaskContext) -> str:
    """Attempt 1 fails; attempt 2 first delivers a stale completion of attempt 1."""
    spec = context.spec
    if spec.attempt == 1:
        raise RuntimeError("attempt 1 fails")
    app = LATE["app"]
    assert isinstance(app, Interlock)
    driver = app.orchestrator.drivers[spec.run_id]
    stale = context.output_path.with_name("stale-attempt-1.part")
    stale.write_text("written by attempt 1, too late\n")
    LATE["stale"] = stale
    late = ev.TaskCompleted(at=0.0, task_id=spec.task_id, attempt=1, artifact="", sha256="", size=0)
    app.orchestrator.report(driver, Report(event=late, tmp=stale))
    return "written by attempt 2\n"


register("reliability_second_attempt_wins", _second_attempt_wins)


def test_a_result_of_attempt_one_after_attempt_two_started_is_rejected(tmp_path: Path) -> None:
    """A completion of a superseded attempt is dropped by its attempt token and its output
    discarded; the committed output is the current attempt's."""
    flow = definition("""
    p:
      phases:
        - id: one
          workers:
            - {role: w, call: reliability_second_attempt_wins, retries: 1,
               backoff: {initial: 0}, final: true}
    """)
    app = Interlock(tmp_path / "home", settings=SETTINGS)
    LATE["app"] = app
    state = app.run(flow, topic="late")
    assert state.status.value == "delivered"
    completed = [s.data for s in app.store.events(state.run_id) if s.kind == "task_completed"]
    assert [c["attempt"] for c in completed] == [2]
    assert (app.run_dir(state.run_id) / "w.md").read_text() == "written by attempt 2\n"
    stale = LATE["stale"]
    assert isinstance(stale, Path) and not stale.exists()
    assert history_problems(app, state.run_id, flow) == []
    app.close()


PAUSED_FLOW = f"""
p:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {{role: a, command: [{json.dumps(sys.executable)}, -c, "print('draft')"]}}
    - id: publish
      workers:
        - {{role: b, command: [{json.dumps(sys.executable)}, -c, "print('done')"], final: true}}
"""


def test_two_approvals_at_once_record_exactly_one(tmp_path: Path) -> None:
    """Two people approve the same pause at the same moment (and a third approval slips past
    the API's check): exactly one approval is recorded and the run is delivered."""
    flow = definition(PAUSED_FLOW)
    home = tmp_path / "home"
    app = Interlock(home, settings=SETTINGS)
    state = app.run(flow, topic="approve")
    assert state.status.value == "paused"
    run_id = state.run_id
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve() -> None:
        other = Interlock(home)
        barrier.wait()
        try:
            other.approve(run_id, "ok", by="person")
            outcomes.append("posted")
        except UsageError as exc:
            outcomes.append(str(exc))
        finally:
            other.close()

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    app.store.post_command(run_id, "approve", "raced past the check", "person", 0.0)
    assert "posted" in outcomes
    final = app.resume(run_id)
    assert final.status.value == "delivered"
    assert kinds(app, run_id).count("approved") == 1
    assert history_problems(app, run_id, flow) == []
    app.close()


def _cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_approval_across_a_restart_is_recorded_once(tmp_path: Path) -> None:
    """`interlock approve` dies before recording (its command waits in the inbox); a second
    approve after the restart neither doubles nor loses it; resume delivers with one approval."""
    flow_file = tmp_path / "flow.yaml"
    flow_file.write_text(PAUSED_FLOW)
    home = tmp_path / "home"
    first = _cli(home, "run", str(flow_file), "p", "--topic", "t", "--run-id", "approve-twice")
    assert first.returncode == 3, first.stderr
    killed = _cli(home, "approve", "approve-twice", crash_at="before_append")
    assert killed.returncode == -9, killed.stderr
    again = _cli(home, "approve", "approve-twice")
    assert again.returncode in (0, 2), again.stderr
    resumed = _cli(home, "resume", "approve-twice")
    assert resumed.returncode == 0, resumed.stderr
    app = Interlock(home)
    assert kinds(app, "approve-twice").count("approved") == 1
    assert kinds(app, "approve-twice")[-2:] == ["delivered", "archived"]
    app.close()
