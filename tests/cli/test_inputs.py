"""Inputs given on the command line take their declared type before the run is recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from interlock import Interlock
from interlock.core.events import RunCreated

BRANCHING = """\
p:
  inputs:
    n: 1
    loud: false
  phases:
    - id: plan
      workers:
        - role: planner
          command: ["sh", "-c", "echo plan > {output}"]
      next:
        - {if: "inputs.n > 3 && inputs.loud", goto: big}
        - {goto: small}
    - id: small
      workers:
        - role: s
          command: ["sh", "-c", "echo small > {output}"]
      next: [{goto: final}]
    - id: big
      workers:
        - role: b
          command: ["sh", "-c", "echo big > {output}"]
    - id: final
      workers:
        - role: editor
          final: true
          reads: [planner.md, "s.md?", "b.md?"]
          command: ["sh", "-c", 'cat "$@" > {output}', "sh", "{inputs}"]
"""


def run(env: dict[str, str], cwd: Path, *given: str) -> subprocess.CompletedProcess[str]:
    inputs = [arg for value in given for arg in ("-i", value)]
    return interlock(env, cwd, "run", "flow.yaml", "p", "-t", "x", *inputs)


def interlock(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "interlock", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def test_a_number_and_a_flag_given_as_text_drive_a_condition(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`-i n=4 -i loud=yes` compare as a number and a truth value, so the big branch runs."""
    (tmp_path / "flow.yaml").write_text(BRANCHING)
    result = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "n=4", "-i", "loud=yes"
    )
    assert result.returncode == 0, result.stderr
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().split() == ["plan", "big"]
    result = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "n=4", "-i", "loud=off"
    )
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().split() == ["plan", "small"]


def test_a_value_not_of_its_type_refuses_the_run_before_it_is_recorded(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`-i n=four` is exit 2 naming the input, its type and the value; no run is recorded."""
    (tmp_path / "flow.yaml").write_text(BRANCHING)
    result = run(cli_env, tmp_path, "n=four")
    assert result.returncode == 2
    assert (
        "pipeline 'p': input 'n' is a whole number, e.g. 4, like its default 1; got 'four'"
        in result.stderr
    )
    result = run(cli_env, tmp_path, "loud=maybe")
    assert result.returncode == 2 and "input 'loud' is true or false" in result.stderr
    assert interlock(cli_env, tmp_path, "runs").stdout.startswith("no runs yet")


def test_a_declared_type_without_a_default(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`type: number` on a required input converts it too; a quoted default of another type is
    refused by `check` with the fix."""
    flow = BRANCHING.replace("    n: 1\n", "    n: {required: true, type: number}\n")
    (tmp_path / "flow.yaml").write_text(flow)
    result = interlock(
        cli_env, tmp_path, "run", "flow.yaml", "p", "-t", "x", "-i", "n=3.5", "-i", "loud=1"
    )
    final = Path(result.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().split() == ["plan", "big"]
    (tmp_path / "flow.yaml").write_text(flow.replace("required: true", 'default: "3"'))
    result = interlock(cli_env, tmp_path, "check", "flow.yaml")
    assert result.returncode == 2
    assert "the default '3' is text, but the input's type is 'number'" in result.stderr


def test_rerun_and_its_dry_run_check_inputs_alike(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A plan refuses what the rerun would (an unknown input, a value not of its type), and a
    rerun's `-i n=9` is a number too: the plan foresees the other branch, which then runs."""
    (tmp_path / "flow.yaml").write_text(BRANCHING)
    first = run(cli_env, tmp_path)
    source = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    for given, message in [("nope=1", "has no input 'nope'"), ("n=four", "is a whole number")]:
        for dry in (["--dry-run"], []):
            result = interlock(cli_env, tmp_path, "rerun", source, "-i", given, *dry)
            assert result.returncode == 2 and message in result.stderr, (given, dry)
    options = ["-i", "n=9", "-i", "loud=true"]
    plan = interlock(cli_env, tmp_path, "rerun", source, *options, "--dry-run")
    assert plan.returncode == 0 and "goes to 'big'" in " ".join(plan.stdout.split())
    again = interlock(cli_env, tmp_path, "rerun", source, *options)
    final = Path(again.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().split() == ["plan", "big"]


def test_a_rerun_carries_an_optional_input_left_unset(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An optional input without a default that the source run left unset stays unset in a
    rerun and its plan (it was once taken for a value to convert, and refused)."""
    flow = BRANCHING.replace("    loud: false\n", "    loud: false\n    ratio: {type: number}\n")
    (tmp_path / "flow.yaml").write_text(flow)
    first = run(cli_env, tmp_path)
    source = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    plan = interlock(cli_env, tmp_path, "rerun", source, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "3 task(s) reused, 0 to run" in plan.stdout  # the same inputs: nothing changes
    again = interlock(cli_env, tmp_path, "rerun", source, "-i", "n=2")
    assert again.returncode == 0, again.stderr
    final = Path(again.stdout.strip().splitlines()[-1].removeprefix("delivered: "))
    assert final.read_text().split() == ["plan", "small"]
    app = Interlock(Path(cli_env["INTERLOCK_HOME"]))
    try:
        original, created = (app.events(r)[0].event for r in (source, final.parent.name))
    finally:
        app.close()
    assert isinstance(original, RunCreated) and isinstance(created, RunCreated)
    assert created.rerun_of == source
    assert original.inputs == {"n": 1, "loud": False, "ratio": None}
    assert created.inputs == {"n": 2, "loud": False, "ratio": None}  # "ratio" stays unset


def test_an_input_given_twice_is_refused(cli_env: dict[str, str], tmp_path: Path) -> None:
    """`-i n=1 -i n=2` names both instead of letting the last one win unseen."""
    (tmp_path / "flow.yaml").write_text(BRANCHING)
    result = run(cli_env, tmp_path, "n=1", "n=2")
    assert result.returncode == 2
    assert "'n' is given twice (n=1 and n=2); give it once" in result.stderr
    assert interlock(cli_env, tmp_path, "runs").stdout.startswith("no runs yet")


def test_a_branch_not_taken_is_skipped_once_the_run_ends(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A delivered run's phase that its branch passed over will never run: `status` says
    "skipped", not "pending" as if it were still to come."""
    import json

    (tmp_path / "flow.yaml").write_text(BRANCHING)
    result = run(cli_env, tmp_path)
    run_id = next(line.split()[1] for line in result.stderr.splitlines() if line.startswith("run "))
    view = json.loads(interlock(cli_env, tmp_path, "status", run_id, "--json").stdout)
    phases = {phase["id"]: phase for phase in view["phases"]}
    assert phases["small"]["status"] == "completed"
    assert phases["big"]["status"] == "skipped"
    assert phases["big"]["workers"]["b"]["status"] == "skipped"
    shown = interlock(cli_env, tmp_path, "status", run_id).stdout
    assert "skipped" in shown and "pending" not in shown


def test_an_empty_topic_is_refused_before_anything_is_recorded(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`--topic ""` (or spaces) would send tasks that read `{{ topic }}` nothing to work on:
    `run` and `submit` refuse it with exit 2 and the fix, and the API refuses it too."""
    (tmp_path / "flow.yaml").write_text(BRANCHING)
    for command in ("run", "submit"):
        for topic in ("", "   "):
            result = interlock(cli_env, tmp_path, command, "flow.yaml", "p", "-t", topic)
            assert result.returncode == 2, (command, topic, result.stderr)
            assert "pipeline 'p': the topic is empty; give what the run is about" in result.stderr
    assert interlock(cli_env, tmp_path, "runs").stdout.startswith("no runs yet")
    from interlock.core.loader import load_workflow
    from interlock.errors import UsageError

    app = Interlock(home=tmp_path / "api")
    try:
        definition = load_workflow(tmp_path / "flow.yaml").get("p")
        with pytest.raises(UsageError, match="the topic is empty"):
            app.start(definition, topic="\n")
    finally:
        app.close()
