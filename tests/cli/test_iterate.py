"""The iteration commands of the real `interlock` CLI: rerun, rerun --dry-run, diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PIPELINE = """
demo:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["sh", "-c", "echo A-$$ > {output}"]
        - role: b
          command: ["sh", "-c", "echo B > {output}"]
    - id: synth
      pause_after: PAUSE
      workers:
        - role: s
          final: true
          reads: [a.md, b.md]
          command: ["sh", "-c", "cat $0 $1 > $2", "{input:a.md}", "{input:b.md}", "{output}"]
"""


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the CLI; it never prints a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def started(result: subprocess.CompletedProcess[str]) -> str:
    """The run id a run or rerun printed."""
    return next(line.split()[1] for line in result.stderr.splitlines() if line.startswith("run "))


def workflow(tmp_path: Path, pause: bool = False) -> Path:
    """The demo pipeline in a file."""
    path = tmp_path / "demo.yaml"
    path.write_text(PIPELINE.replace("PAUSE", "true" if pause else "false"))
    return path


def test_rerun_drives_in_the_foreground_with_runs_exit_codes(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`rerun --from synth` delivers (exit 0), and `status` says what it was a rerun of."""
    source = started(cli(cli_env, "run", str(workflow(tmp_path)), "demo", "-t", "x"))
    result = cli(cli_env, "rerun", source, "--from", "synth")
    assert result.returncode == 0, result.stderr
    assert "delivered:" in result.stdout
    assert "1 task(s) completed, 2 reused (paid for by earlier runs)" in result.stderr
    new = started(result)
    status = cli(cli_env, "status", new)
    assert f"rerun of {source}" in status.stdout and "reused" in status.stdout
    ledger = json.loads(cli(cli_env, "ledger", new).stdout)
    assert [t["status"] for t in ledger["tasks"]] == ["REUSED", "REUSED", "COMPLETE"]
    explain = cli(cli_env, "explain", new).stdout
    assert f"same fingerprint as a@1 of {source}" in explain


def test_dry_run_prints_reuse_or_run_per_task_and_records_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """--dry-run names each task's fate and the part that changed; no run is added."""
    source = started(cli(cli_env, "run", str(workflow(tmp_path)), "demo", "-t", "x"))
    edited = tmp_path / "edited.yaml"
    edited.write_text(workflow(tmp_path).read_text().replace("echo B", "echo BB"))
    result = cli(cli_env, "rerun", source, "--workflow", str(edited), "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reuse a@1")
    assert lines[1].startswith("run   b@1") and "the worker's definition" in lines[1]
    assert lines[2].startswith("run   s@1") and "an input file it reads" in lines[2]
    assert "1 task(s) reused, 2 to run" in lines[-1]
    plan = json.loads(
        cli(cli_env, "rerun", source, "--from", "synth", "--dry-run", "--json").stdout
    )
    assert [t["action"] for t in plan["tasks"]] == ["reuse", "reuse", "run"]
    runs = json.loads(cli(cli_env, "runs", "--json").stdout)
    assert [r["run_id"] for r in runs] == [source]


def test_bad_reruns_exit_2_with_the_fix(cli_env: dict[str, str], tmp_path: Path) -> None:
    """An unknown phase, an unknown run and a paused source are refused, changing nothing."""
    paused = cli(cli_env, "run", str(workflow(tmp_path, pause=True)), "demo", "-t", "x")
    assert paused.returncode == 3
    source = started(paused)
    result = cli(cli_env, "rerun", source)
    assert result.returncode == 2 and "still paused" in result.stderr
    assert f"interlock cancel {source}" in result.stderr
    cli(cli_env, "cancel", source)
    result = cli(cli_env, "rerun", source, "--from", "nope")
    assert result.returncode == 2 and "its phases are collect, synth" in result.stderr
    result = cli(cli_env, "rerun", "no-such-run")
    assert result.returncode == 2 and "no run matches" in result.stderr
    result = cli(cli_env, "rerun", source, "--workflow", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "no such workflow file" in result.stderr
    runs = json.loads(cli(cli_env, "runs", "--json").stdout)
    assert len(runs) == 1


def test_diff_prints_a_task_table_and_output_diffs(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`diff A B --outputs` lists each task's fate in both runs and a unified diff of the
    changed output; unknown runs exit 2."""
    source = started(cli(cli_env, "run", str(workflow(tmp_path)), "demo", "-t", "x"))
    edited = tmp_path / "edited.yaml"
    edited.write_text(workflow(tmp_path).read_text().replace("echo B", "echo BB"))
    new = started(cli(cli_env, "rerun", source, "--workflow", str(edited)))
    result = cli(cli_env, "diff", source, new, "--outputs")
    assert result.returncode == 0, result.stderr
    rows = {
        line.split()[0]: line.split()[1:4]
        for line in result.stdout.splitlines()[2:]
        if "@" in line[:6]
    }
    assert rows["a@1"] == ["ran", "reused", "same"]
    assert rows["b@1"] == ["ran", "ran", "changed"]
    assert "-B\n+BB" in result.stdout
    data = json.loads(cli(cli_env, "diff", source, new, "--json").stdout)
    assert data["runs"]["rerun_of"] == [None, source]
    assert cli(cli_env, "diff", source, "nope").returncode == 2


def test_cache_list_and_clear(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`cache list` shows what cached workers left; `cache clear --older-than` keeps new ones;
    a bad age is exit 2."""
    flow = workflow(tmp_path)
    flow.write_text(flow.read_text().replace("demo:\n", "demo:\n  cache: {ttl: 7d}\n", 1))
    cli(cli_env, "run", str(flow), "demo", "-t", "x")
    entries = json.loads(cli(cli_env, "cache", "list", "--json").stdout)
    assert sorted(e["task_id"] for e in entries) == ["a@1", "b@1", "s@1"]
    second = cli(cli_env, "run", str(flow), "demo", "-t", "x")
    assert second.returncode == 0
    assert "reused" in cli(cli_env, "status", started(second)).stdout
    assert cli(cli_env, "run", str(flow), "demo", "-t", "x", "--no-cache").returncode == 0
    assert "0 cache entries removed" in cli(cli_env, "cache", "clear", "--older-than", "1h").stdout
    bad = cli(cli_env, "cache", "clear", "--older-than", "soon")
    assert bad.returncode == 2 and "30m, 12h, 7d" in bad.stderr
    # The --no-cache run reused nothing but left its fresh outputs for the next runs.
    assert "6 cache entries removed" in cli(cli_env, "cache", "clear").stdout
    assert "empty" in cli(cli_env, "cache", "list").stdout


def test_rerun_says_when_the_workflow_file_changed_since_the_run(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An edit to the file after the run: `rerun` without --workflow runs the definition the
    run started with, so the plan and the rerun both say so, with the command that uses the
    edits; with --workflow the edit runs, and an unedited file says nothing."""
    flow = workflow(tmp_path)
    source = started(cli(cli_env, "run", str(flow), "demo", "-t", "x"))
    unchanged = cli(cli_env, "rerun", source, "--dry-run")
    assert "has changed" not in unchanged.stdout + unchanged.stderr
    flow.write_text(flow.read_text().replace("echo B >", "echo B2 >"))
    note = (
        f"note: {flow} has changed since {source} started: this rerun uses the definition "
        f"that run started with. To rerun with the edits: interlock rerun {source} "
        f"--workflow {flow}"
    )
    planned = cli(cli_env, "rerun", source, "--dry-run")
    assert note in " ".join(planned.stdout.split())
    assert "0 to run" in planned.stdout
    ran = cli(cli_env, "rerun", source)
    assert ran.returncode == 0, ran.stderr
    assert note in ran.stderr
    edited = cli(cli_env, "rerun", source, "--workflow", str(flow), "--dry-run")
    assert "has changed" not in edited.stdout + edited.stderr
    assert "run   b@1" in edited.stdout


FAILING = """
fails:
  phases:
    - id: ask
      workers:
        - role: slow
          command: ["sh", "-c", "while [ ! -e GATE ]; do sleep 0.05; done; echo kept > {output}"]
        - role: broken
          command: ["sh", "-c", "sleep 0.3; echo boom >&2; exit 1"]
    - id: end
      workers:
        - role: last
          final: true
          reads: [slow.md]
          command: ["sh", "-c", "cat $0 > $1", "{input:slow.md}", "{output}"]
"""


def test_a_failing_run_waits_for_its_running_tasks_and_says_so(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A task that fails for good while a sibling runs: `status` says the run fails once the
    sibling has ended and how to stop it now; the run then fails with the sibling's output
    kept, and a rerun of the fixed file reuses it."""
    import time

    flow = tmp_path / "fails.yaml"
    gate = tmp_path / "gate"  # `slow` runs until the test has seen the run failing
    flow.write_text(FAILING.replace("GATE", str(gate)))
    running = subprocess.Popen(
        [sys.executable, "-m", "interlock", "run", str(flow), "fails", "-t", "x"],
        env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
        listed = cli(cli_env, "runs", "--json")
        runs = json.loads(listed.stdout or "[]")
        if runs:
            shown = cli(cli_env, "status", runs[0]["run_id"])
            line = next((x for x in shown.stdout.splitlines() if x.startswith("failing:")), "")
            if line:
                break
    gate.touch()
    run_id = runs[0]["run_id"]
    assert line == (
        "failing: task broken@1 failed for good; the run fails once slow@1 has ended, so that "
        f"what was paid for is kept for a rerun ('interlock cancel {run_id}' stops it now)"
    )
    out, err = running.communicate(timeout=60)
    assert running.returncode != 0 and "failed: task broken@1" in out + err
    status = cli(cli_env, "status", run_id, "--json")
    view = json.loads(status.stdout)
    assert view["status"] == "failed" and view["failing"] is None
    assert view["phases"][0]["workers"]["slow"]["status"] == "completed"
    fixed = FAILING.replace("GATE", str(gate)).replace(
        "echo boom >&2; exit 1", "echo fine > {output}"
    )
    flow.write_text(fixed)
    rerun = cli(cli_env, "rerun", run_id, "--workflow", str(flow))
    assert rerun.returncode == 0, rerun.stderr
    assert "1 reused" in rerun.stderr
