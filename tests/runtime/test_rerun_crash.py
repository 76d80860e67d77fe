"""Reruns killed (SIGKILL) at every point of a reuse, then resumed: nothing lost, nothing
reused twice, every reused output on disk with its recorded hash."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from interlock.runtime.faults import REUSE_CRASH_POINTS

# Three collectors (one writes more than the ledger holds inline, so its reuse is placed from
# the source run's folder), then a synthesis that reads them all. Each logs what ran.
PIPELINE = """
crash:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["sh", "-c", "echo A-$$ > {output}; echo a >> {workflow_dir}/ran.log"]
        - role: b
          command: ["sh", "-c", "echo B-$$ > {output}; echo b >> {workflow_dir}/ran.log"]
        - role: big
          command: ["sh", "-c", "head -c 1200000 /dev/zero | tr '\\\\0' x > {output};
                    echo big >> {workflow_dir}/ran.log"]
    - id: synth
      mode: sequential
      workers:
        - role: s
          reads: [a.md, b.md]
          command: ["sh", "-c", "cat $0 $1 > $2; echo s >> {workflow_dir}/ran.log",
                    "{input:a.md}", "{input:b.md}", "{output}"]
        - role: t
          final: true
          reads: [s.md]
          command: ["sh", "-c", "cat $0 > $1; echo done >> $1; echo t >> {workflow_dir}/ran.log",
                    "{input:s.md}", "{output}"]
"""
POINTS = [*REUSE_CRASH_POINTS, "before_append", "after_append", "before_dispatch"]


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI, armed to kill itself at `crash_at`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def events(home: Path, run_id: str) -> list[dict[str, Any]]:
    """The run's history as JSON lines."""
    result = cli(home, "events", run_id, "--json")
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A delivered source run: (home, workflow, run id)."""
    workdir = tmp_path_factory.mktemp("rerun-crash")
    flow = workdir / "crash.yaml"
    flow.write_text(PIPELINE)
    home = workdir / "home"
    result = cli(home, "run", str(flow), "crash", "-t", "x", "--run-id", "source-run")
    assert result.returncode == 0, result.stderr
    (workdir / "ran.log").unlink()
    return home, flow, "source-run"


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_rerun_killed_anywhere_resumes_to_the_same_result(
    source: tuple[Path, Path, str], point: str, n: int
) -> None:
    """Killed at the n-th pass of `point`, `resume` delivers; the collectors never ran again,
    each was reused exactly once, and its file has the hash the ledger recorded."""
    home, flow, source_id = source
    run_id = f"rerun-{point.replace('_', '-')}-{n}"
    log = flow.parent / "ran.log"
    log.unlink(missing_ok=True)
    first = cli(home, "rerun", source_id, "--from", "synth", "--run-id", run_id,
                crash_at=f"{point}:{n}")  # fmt: skip
    killed = first.returncode == -signal.SIGKILL
    if point in REUSE_CRASH_POINTS and n == 1:
        assert killed, f"{point} was never reached"
    if killed:
        resumed = cli(home, "resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
    else:
        assert first.returncode == 0, first.stderr
    history = events(home, run_id)
    reused = [e["data"] for e in history if e["kind"] == "task_reused"]
    assert sorted(d["task_id"] for d in reused) == ["a@1", "b@1", "big@1"]
    completed = {e["data"]["task_id"] for e in history if e["kind"] == "task_completed"}
    assert completed == {"s@1", "t@1"}
    ran = log.read_text().split() if log.exists() else []
    assert not {"a", "b", "big"} & set(ran), ran
    run_dir = home / "archive" / run_id
    for data in reused:
        body = (run_dir / str(data["artifact"])).read_bytes()
        assert hashlib.sha256(body).hexdigest() == data["sha256"], data["artifact"]
    source_dir = home / "archive" / source_id
    assert (run_dir / "a.md").read_bytes() == (source_dir / "a.md").read_bytes()
    assert (run_dir / "final.md").read_text().endswith("done\n")
    assert history[-1]["kind"] == "archived"
