"""A real `interlock run` of a fan-out with `tolerate`: `status` and `explain` show each
item's outcome, and one failed item past the tolerance fails the run naming them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import cli, run_id_of

# Items named "bad" fail on every attempt; the editor joins what the writers wrote.
FLOW = """
job:
  phases:
    - id: plan
      workers:
        - role: planner
          command: ["{python}", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
                    "{output}", '{"parts": ["a", "bad", "c", "bad"]}']
          extract: {parts: {json: parts, type: list}}
    - id: write
      for_each: {items: planner.parts, tolerate: TOLERATE}
      workers:
        - role: writer
          retries: 1
          backoff: {initial: 0.01}
          command: ["{python}", "-c", "WRITE", "{output}", "{item}"]
    - id: edit
      workers:
        - role: editor
          final: true
          reads: [writer.md]
          command: ["{python}", "-c", "JOIN", "{output}", "{inputs}"]
"""
WRITE = (
    "import sys; sys.exit('cannot write ' + sys.argv[2]) if sys.argv[2] == 'bad' "
    "else open(sys.argv[1], 'w').write('section ' + sys.argv[2])"
)
JOIN = "import sys; open(sys.argv[1], 'w').write(' + '.join(open(p).read() for p in sys.argv[2:]))"


def flow(tmp_path: Path, tolerate: str) -> str:
    """The workflow file with this tolerance."""
    path = tmp_path / "flow.yaml"
    text = FLOW.replace("TOLERATE", tolerate).replace("WRITE", WRITE).replace("JOIN", JOIN)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_status_shows_each_items_outcome_within_the_tolerance(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Two of four items fail under `tolerate: 2`: the run delivers the two sections that
    were written, and `status` and `explain` say which items completed and which failed."""
    result = cli(cli_env, "run", flow(tmp_path, "2"), "job", "--topic", "t", timeout=120)
    assert result.returncode == 0, result.stderr
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text(encoding="utf-8") == "section a + section c"
    run_id = run_id_of(result)
    shown = cli(cli_env, "status", run_id).stdout
    assert "items of 'write': 2 of 4 completed, 2 failed (tolerate 2: 2 may fail)" in shown
    assert "item 1 failed (writer@1.1): exited with code 1: cannot write bad" in shown
    assert "item 3 failed (writer@1.3)" in shown
    row = next(line for line in shown.splitlines() if line.split()[:2] == ["write", "writer"])
    assert "completed (2 of 4 items failed)" in row, shown
    view = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    items = next(p for p in view["phases"] if p["id"] == "write")["items"]
    assert (items["completed"], items["failed"], items["allowed"]) == (2, 2, 2)
    assert [(f["index"], f["item"]) for f in items["failed_items"]] == [(1, "bad"), (3, "bad")]
    explained = cli(cli_env, "explain", run_id).stdout
    assert "items of 'write' visit 1: 2 of 4 completed (0, 2), 2 failed (1, 3)" in explained
    assert "tolerate" in explained and "item_failed" in explained


def test_one_item_past_the_tolerance_fails_the_run_naming_count_and_items(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Under `tolerate: 1` the second failed item fails the run; the failure says 2 of 4
    items failed and names items 1 and 3."""
    result = cli(cli_env, "run", flow(tmp_path, "1"), "job", "--topic", "t", timeout=120)
    assert result.returncode != 0
    run_id = run_id_of(result)
    view = json.loads(cli(cli_env, "status", run_id, "--json").stdout)
    assert view["status"] == "failed"
    assert "2 of 4 items failed, past tolerate 1; failed items: 1, 3" in view["failure"]
    assert "2 of 4 items failed" in result.stderr + result.stdout


def test_a_rerun_runs_the_failed_items_again_and_reuses_the_completed_ones(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`interlock rerun` of a run with failed items reuses the items that completed and runs
    the failed ones again (here they fail again, within the tolerance, and it delivers)."""
    first = cli(cli_env, "run", flow(tmp_path, "2"), "job", "--topic", "t", timeout=120)
    assert first.returncode == 0, first.stderr
    again = cli(cli_env, "rerun", run_id_of(first), timeout=120)
    assert again.returncode == 0, again.stderr
    events = [
        json.loads(line)
        for line in cli(cli_env, "events", run_id_of(again), "--json").stdout.splitlines()
    ]
    reused = {e["data"]["task_id"] for e in events if e["kind"] == "task_reused"}
    failed = [e["data"]["task_id"] for e in events if e["kind"] == "item_failed"]
    assert {"writer@1.0", "writer@1.2"} <= reused and not {"writer@1.1", "writer@1.3"} & reused
    assert sorted(failed) == ["writer@1.1", "writer@1.3"]  # each once, in either order
