"""`interlock status` of a parent lists its child runs with their own state and cost,
`status` of a child names its parent and the task it works for, and `runs` marks child runs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import cli

from interlock.core.subpipelines import child_run_id

FLOW = """
parent:
  phases:
    - id: delegate
      workers:
        - {role: summary, pipeline: checked, task: "Summary of {{ topic }}", final: true}
checked:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: drafter, model: offline-model, task: "Draft {{ topic }}"}
    - id: write
      workers:
        - {role: writer, model: offline-model, task: "Write {{ topic }}", final: true}
"""


def test_status_lists_children_and_a_child_names_its_parent(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A parent paused by its child: `status PARENT` has a child-runs table with the child's
    id, pipeline, paused state and cost (and `--json` the same as `child_runs`); `status
    CHILD` names the parent, its task and state; `runs` marks the child and lists it right
    under its parent (and `--json` gives its `parent_run`); after approval the child shows
    delivered."""
    flow = tmp_path / "family.yaml"
    flow.write_text(FLOW)
    started = cli(cli_env, "run", str(flow), "parent", "--topic", "otters")
    assert started.returncode == 3, started.stderr  # paused for approval
    [run_id] = [r["run_id"] for r in json.loads(cli(cli_env, "runs", "--json").stdout)
                if r["pipeline"] == "parent"]  # fmt: skip
    child = child_run_id(run_id, "summary@1", 1)
    shown = cli(cli_env, "status", run_id, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert "child runs" in lines
    held = f"paused because child run {child} is paused (pause_after at phase 'draft');"
    assert any(line.startswith(held) for line in lines), "the child's id is said once"
    row = next(line for line in lines if line.startswith("summary@1 "))
    assert row.startswith(f"summary@1 {child} checked paused (pause_after at phase 'draft')")
    assert row.endswith("$0.0000")
    whole = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    assert [(c["run_id"], c["status"], c["task_id"]) for c in whole["child_runs"]] == [
        (child, "paused", "summary@1")
    ]
    listed = {r["run_id"]: r for r in json.loads(cli(cli_env, "runs", "--json").stdout)}
    assert listed[child]["parent_run"] == run_id and listed[run_id]["parent_run"] is None
    table = [line.split() for line in cli(cli_env, "runs").stdout.splitlines()]
    ids = [row[1] if row[0] == "↳" else row[0] for row in table[1:]]
    assert ["↳", child] in [row[:2] for row in table]
    assert ids.index(child) == ids.index(run_id) + 1, "a child's row is right under its parent"
    kid = " ".join(cli(cli_env, "status", child).stdout.split())
    assert f"child run of {run_id} (task summary@1, pipeline parent, paused)" in kid
    approved = cli(cli_env, "approve", run_id, timeout=120)
    assert approved.returncode == 0, approved.stderr
    after = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    assert after["child_runs"][0]["status"] == "delivered"
    assert after["child_runs"][0]["detail"] == ""
