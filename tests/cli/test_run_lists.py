"""`runs` says when its limit left runs out, and a run-id prefix that matches many runs
says how many it did not list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from interlock import Interlock

FLOW = """
p:
  phases:
    - id: one
      workers:
        - {role: w, model: any, final: true, task: "Write."}
"""


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    command = [sys.executable, "-m", "interlock", "--home", str(home), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def _submitted(tmp_path: Path, count: int) -> Path:
    flow = tmp_path / "flow.yaml"
    flow.write_text(FLOW)
    home = tmp_path / "home"
    il = Interlock(home)
    try:
        for n in range(count):
            il.submit(flow, "p", topic=f"t{n}", run_id=f"job-{n:02d}")
    finally:
        il.close()
    return home


def _rows(listing: str) -> list[str]:
    return [line.split()[0] for line in listing.splitlines() if line.strip().startswith("job-")]


def test_runs_says_when_the_limit_left_some_out(tmp_path: Path) -> None:
    home = _submitted(tmp_path, 4)
    cut = _cli(home, "runs", "--limit", "3")
    assert cut.returncode == 0, cut.stderr
    assert _rows(cut.stdout) == ["job-03", "job-02", "job-01"]
    assert "showing the newest 3 runs" in cut.stdout and "--limit 12" in cut.stdout
    whole = _cli(home, "runs", "--limit", "4")
    assert len(_rows(whole.stdout)) == 4
    assert "showing the newest" not in whole.stdout
    listed = _cli(home, "runs", "--limit", "3", "--json")
    assert len(json.loads(listed.stdout)) == 3


def test_a_prefix_of_many_runs_counts_the_ones_it_does_not_name(tmp_path: Path) -> None:
    home = _submitted(tmp_path, 8)
    found = _cli(home, "status", "job-")
    assert found.returncode == 2, found.stdout + found.stderr
    said = found.stdout + found.stderr
    assert "'job-' matches 8 runs" in said and "and 3 more" in said
    assert "give more of the id" in said
