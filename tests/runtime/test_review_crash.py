"""Edits and rejections killed (SIGKILL) at every point of their recording, then resumed:
nothing lost, nothing recorded twice, the edited text on disk with its recorded hash."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from interlock.runtime.faults import REVIEW_CRASH_POINTS

PIPELINE = """
crash:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["sh", "-c", "echo A > {output}; echo a >> {workflow_dir}/ran.log"]
        - role: b
          command: ["sh", "-c", "echo B > {output}; echo b >> {workflow_dir}/ran.log"]
    - id: synth
      pause_after: true
      workers:
        - role: s
          reads: [a.md, b.md]
          command: ["sh", "-c", "cat $0 $1 > $2; echo s >> {workflow_dir}/ran.log",
                    "{input:a.md}", "{input:b.md}", "{output}"]
    - id: publish
      workers:
        - role: t
          final: true
          reads: [s.md]
          command: ["sh", "-c", "cat $0 > $1; echo done >> $1; echo t >> {workflow_dir}/ran.log",
                    "{input:s.md}", "{output}"]
"""
POINTS = [*REVIEW_CRASH_POINTS, "before_append", "after_append"]


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI, armed to kill itself at `crash_at`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    if crash_at:
        env["INTERLOCK_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(home), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def kinds(home: Path, run_id: str) -> list[str]:
    """The kinds of the run's events, in order."""
    result = cli(home, "events", run_id, "--json")
    return [json.loads(line)["kind"] for line in result.stdout.splitlines()]


def paused(tmp_path: Path) -> tuple[Path, Path]:
    """A run paused after synth: (home, workdir)."""
    (tmp_path / "crash.yaml").write_text(PIPELINE)
    home = tmp_path / "home"
    result = cli(home, "run", str(tmp_path / "crash.yaml"), "crash", "-t", "x", "--run-id", "r")
    assert result.returncode == 3, result.stderr
    return home, tmp_path


def finish(home: Path, command: list[str], point: str) -> subprocess.CompletedProcess[str]:
    """Run `command` armed at `point` (it must die there), then resume."""
    first = cli(home, *command, crash_at=point)
    assert first.returncode == -signal.SIGKILL, f"{point} was not reached: {first.stderr}"
    return cli(home, "resume", "r")


@pytest.mark.parametrize("point", [p for p in POINTS if p != "after_record_reject"])
def test_an_edit_killed_anywhere_is_recorded_once_and_written(tmp_path: Path, point: str) -> None:
    """Killed while recording an edit (or between recording and writing it), the edit is
    recorded exactly once after resume, the file holds the recorded text, and approving
    reruns s once, pauses to show it, and delivers once approved again."""
    home, workdir = paused(tmp_path)
    new = workdir / "new-a.md"
    new.write_text("A, edited\n")
    finish(home, ["edit", "r", "a.md", "--file", str(new)], point)
    run_dir = home / "runs" / "r"
    assert kinds(home, "r").count("output_edited") == 1
    assert (run_dir / "a.md").read_text() == "A, edited\n"
    assert not (run_dir / "a.md.unrecorded").exists()
    recorded = next(
        json.loads(line)["data"]
        for line in cli(home, "events", "r", "--json").stdout.splitlines()
        if json.loads(line)["kind"] == "output_edited"
    )
    assert recorded["sha256"] == hashlib.sha256(b"A, edited\n").hexdigest()
    approved = cli(home, "approve", "r")
    assert approved.returncode == 3, approved.stdout + approved.stderr  # the new s, shown
    approved = cli(home, "approve", "r")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    ran = (workdir / "ran.log").read_text().split()
    assert ran.count("s") == 2 and ran.count("a") == 1 and ran.count("t") == 1
    final = (home / "archive" / "r" / "final.md").read_text()
    assert final.startswith("A, edited\nB\n")
    assert cli(home, "verify", "r").returncode == 0


@pytest.mark.parametrize("point", [p for p in POINTS if p != "after_record_edit"])
def test_a_rejection_killed_anywhere_goes_back_once(tmp_path: Path, point: str) -> None:
    """Killed while recording a rejection or right after, resume records it once, runs the
    phase again once and pauses there again."""
    home, workdir = paused(tmp_path)
    result = finish(home, ["reject", "r", "--to", "synth", "-m", "again"], point)
    assert result.returncode == 3, result.stdout + result.stderr
    history = kinds(home, "r")
    assert history.count("rejected") == 1 and history.count("paused") == 2
    ran = (workdir / "ran.log").read_text().split()
    assert ran.count("s") == 2 and ran.count("a") == 1
    assert (home / "runs" / "r" / "s.v2.md").is_file()
