"""A rejection's feedback reaches the models of the phase it sends the run back to."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.runtime.conftest import WriteWorkflow

from interlock import Interlock
from interlock.core.fingerprint import fingerprint
from interlock.core.state import RunStatus

FLOW = """
    p:
      phases:
        - id: draft
          pause_after: true
          workers:
            - {role: writer, model: m, task: "Write about {{ topic }}."}
            - {role: titler, model: m, task: "A title. Keep in mind: {{ feedback }}"}
        - id: publish
          workers: [{role: publisher, model: m, reads: [writer.md], final: true, task: "Publish."}]
"""


def prompt(app: Interlock, run_id: str, task: str) -> str:
    return (app.run_dir(run_id) / "prompts" / f"{task}.1.md").read_text()


def test_models_of_the_rejected_phase_are_told_the_feedback_once(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The writer, whose task does not place {{ feedback }}, is told it after its task and
    shown the version sent back among its inputs; the titler, whose task does, is not told it
    twice; the next phase is not told it at all; and what the writer is told is part of its
    fingerprint."""
    state = app.run(write_workflow(FLOW), topic="tides")
    assert state.status is RunStatus.PAUSED
    assert "feedback" not in prompt(app, state.run_id, "writer@1")
    app.reject(state.run_id, "draft", "Cite two sources.")
    state = app.drive(state.run_id)
    assert state.status is RunStatus.PAUSED
    writer = prompt(app, state.run_id, "writer@2")
    assert (
        "Write about tides.\n\nA person reviewed the previous version (writer.md (the version "
        "sent back), among the input files) and sent it back" in writer
    )
    assert writer.count("Cite two sources.") == 1
    first = (app.run_dir(state.run_id) / "writer.md").read_text()
    assert f"## File: writer.md (the version sent back)\n\n```\n{first}" in writer
    titler = prompt(app, state.run_id, "titler@2")
    assert titler.count("Cite two sources.") == 1 and "version sent back" not in titler
    app.approve(state.run_id)
    state = app.drive(state.run_id)
    assert state.status is RunStatus.DELIVERED
    published = prompt(app, state.run_id, "publisher@1")
    assert published.split("# Task\n\n")[1].startswith("Publish.\n\n# Topic")
    pipeline = app.orchestrator.definition(state.pipeline, state.definition_hash).pipeline
    told = fingerprint(pipeline, state, state.tasks["writer@2"])
    recorded = next(
        e.data["fingerprint_parts"]
        for e in app.events(state.run_id)
        if e.kind == "task_completed" and e.data["task_id"] == "writer@2"
    )
    assert told.parts["feedback"] == recorded["feedback"]  # the same, taken again
    quiet = fingerprint(pipeline, state, state.tasks["publisher@1"])
    assert "feedback" not in quiet.parts


def test_reject_names_the_commands_the_feedback_does_not_reach(tmp_path: Path) -> None:
    """`interlock reject` to a phase of commands that do not place {{ feedback }} says so."""
    (tmp_path / "flow.yaml").write_text(
        "p:\n  phases:\n  - id: draft\n    pause_after: true\n    workers:\n"
        "    - {role: w, command: [sh, -c, 'echo draft > {output}']}\n"
        "    - {role: v, command: [sh, -c, 'echo {{ feedback }} > {output}']}\n"
        "  - id: end\n    workers: [{role: e, final: true, reads: [w.md], "
        "command: [sh, -c, 'cat {read:w.md} > {output}']}]\n"
    )
    env = {"INTERLOCK_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}

    def interlock(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interlock", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    first = interlock("run", "flow.yaml", "p", "-t", "x")
    assert first.returncode == 3, first.stderr
    run_id = next(line.split()[1] for line in first.stderr.splitlines() if line.startswith("run "))
    result = interlock("reject", run_id, "--to", "draft", "-m", "shorter", "--no-drive")
    assert result.returncode == 0, result.stderr
    assert "note: w in 'draft' run again without the feedback" in result.stderr
    assert " v," not in result.stderr and "v in" not in result.stderr
