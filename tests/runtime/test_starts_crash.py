"""Every execution of a worker shows its start, after kills at any point and a resume."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LOG = "echo $INTERLOCK_TASK_ID $INTERLOCK_ATTEMPT >> {workflow_dir}/exec.log"
PIPELINE = f"""
demo:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["sh", "-c", "{LOG}; sleep 0.3; echo A > $0", "{{output}}"]
        - role: b
          command: ["sh", "-c", "{LOG}; echo B > $0", "{{output}}"]
    - id: synth
      workers:
        - role: s
          final: true
          reads: [a.md, b.md]
          command: ["sh", "-c", "{LOG}; cat $0 $1 > $2", "{{input:a.md}}", "{{input:b.md}}",
                    "{{output}}"]
"""


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI, armed to kill itself at `crash_at`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    command = [sys.executable, "-m", "interlock", "--home", str(home), *args]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "crash_at",
    ["before_append:1", "before_append:3", "before_commit_output:1", "after_commit_output:1"],
)
def test_each_execution_of_an_attempt_has_its_start(tmp_path: Path, crash_at: str) -> None:
    """Killed (SIGKILL) while workers ran or had just finished, then resumed: each time a
    command began (it logs itself) the history holds a `task_started` of its attempt, an
    adopted output included."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(PIPELINE)
    home = tmp_path / "home"
    first = cli(home, "run", str(flow), "demo", "-t", "x", "--run-id", "r", crash_at=crash_at)
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert cli(home, "resume", "r").returncode == 0
    lines = (tmp_path / "exec.log").read_text().splitlines()
    ran = collections.Counter(tuple(line.split()) for line in lines)
    history = [json.loads(line) for line in cli(home, "events", "r", "--json").stdout.splitlines()]
    starts: collections.Counter[tuple[str, ...]] = collections.Counter(
        (e["data"]["task_id"], str(e["data"]["attempt"]))
        for e in history
        if e["kind"] == "task_started"
    )
    assert {key: starts[key] for key in ran} == dict(ran), (ran, starts)
    completed = [e["data"]["task_id"] for e in history if e["kind"] == "task_completed"]
    assert sorted(completed) == ["a@1", "b@1", "s@1"]
