"""Sub-pipelines end to end: child runs in the same SQLite store, with the offline provider."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from interlock import Interlock, RunStatus
from interlock.core.subpipelines import child_run_id

from .conftest import WriteWorkflow

PY = sys.executable
WRITE_ARG = "import os, sys; open(os.environ['INTERLOCK_OUTPUT'], 'w').write(sys.argv[1])"

FLOW = """
parent:
  inputs: {lang: French}
  budget: {max_cost_usd: 10}
  phases:
    - id: gather
      workers:
        - {role: notes, model: offline-model}
    - id: delegate
      workers:
        - role: summary
          pipeline: "lib.yaml#summarise"
          task: "Summary of {{ topic }}"
          inputs: {language: "{{ inputs.lang }}"}
          final: true
reviewed:
  phases:
    - id: delegate
      workers:
        - {role: summary, pipeline: "lib.yaml#checked", final: true}
waiting:
  phases:
    - id: delegate
      workers:
        - {role: summary, pipeline: "lib.yaml#signalled", final: true}
"""

LIBRARY = f"""
summarise:
  inputs: {{language: {{required: true}}}}
  phases:
    - id: draft
      workers:
        - {{role: drafter, model: offline-model}}
    - id: write
      workers:
        - role: writer
          final: true
          command: ['{PY}', '-c', "{WRITE_ARG}", 'summary in {{{{ inputs.language }}}}']
signalled:
  phases:
    - id: ship
      wait_for: {{signal: go, timeout: 60}}
      workers:
        - role: shipper
          final: true
          command: ['{PY}', '-c', "{WRITE_ARG}", 'went {{{{ signals.go.where }}}}']
checked:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {{role: drafter, model: offline-model}}
    - id: write
      workers:
        - {{role: writer, final: true, command: ['{PY}', '-c', "{WRITE_ARG}", 'checked']}}
"""


def workflow(write_workflow: WriteWorkflow) -> Path:
    """The parent file and the library file beside it."""
    path = write_workflow(FLOW)
    (path.parent / "lib.yaml").write_text(textwrap.dedent(LIBRARY))
    return path


def only_child(app: Interlock, run_id: str, task_id: str = "summary@1") -> str:
    """The id of the child run the first attempt of `task_id` started."""
    return child_run_id(run_id, task_id, 1)


def test_a_child_run_delivers_and_its_final_output_is_the_workers_output(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The child is a real run with its parent link; its final.md is the worker's output and
    its spend is the task's."""
    run_id = app.start(workflow(write_workflow), "parent", topic="cats")
    state = app.drive(run_id)
    assert state.status is RunStatus.DELIVERED
    child = only_child(app, run_id)
    child_state = app.state(child)
    assert child_state.status is RunStatus.DELIVERED
    assert (child_state.parent_run, child_state.parent_task) == (run_id, "summary@1")
    assert child_state.topic == "Summary of cats"
    assert child_state.inputs == {"language": "French"}
    assert (app.run_dir(run_id) / "final.md").read_text() == "summary in French"
    assert (app.run_dir(child) / "final.md").read_text() == "summary in French"
    assert state.children["summary@1"].run == child
    # What the child spent is charged to the parent's task, so the parent's budget counts it.
    assert child_state.tokens > 0 and state.tasks["summary@1"].tokens == child_state.tokens
    assert state.tokens == state.tasks["notes@1"].tokens + child_state.tokens


def test_a_pause_in_the_child_pauses_the_parent_and_approving_the_parent_resumes_both(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A child paused at approval shows the parent paused because of it; approving the
    parent approves the child, and both go on to deliver."""
    run_id = app.start(workflow(write_workflow), "reviewed", topic="t")
    state = app.drive(run_id)
    child = only_child(app, run_id)
    assert state.status is RunStatus.PAUSED and state.pause_reason == "child"
    assert app.state(child).status is RunStatus.PAUSED
    assert app.status(run_id)["pause"]["child"]["run"] == child
    assert app.status(child)["parent"] == {"run": run_id, "task": "summary@1"}
    shown = subprocess.run(
        [sys.executable, "-m", "interlock", "--home", str(app.home.root), "status", run_id],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert f"paused because child run {child} is paused" in " ".join(shown.split())
    app.approve(run_id)
    assert app.drive(run_id).status is RunStatus.DELIVERED
    assert app.state(child).status is RunStatus.DELIVERED
    assert (app.run_dir(run_id) / "final.md").read_text() == "checked"
    assert [e.kind for e in app.events(child)].count("approved") == 1


def test_approving_the_child_resumes_the_parent_too(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Approving and driving the paused child also takes and finishes its parent."""
    run_id = app.start(workflow(write_workflow), "reviewed", topic="t")
    app.drive(run_id)
    child = only_child(app, run_id)
    app.approve(child)
    app.drive(child)
    assert app.state(child).status is RunStatus.DELIVERED
    assert app.state(run_id).status is RunStatus.DELIVERED
    kinds = [e.kind for e in app.events(run_id)]
    assert kinds.count("resumed") == 1 and "approved" not in kinds


def test_cancelling_the_parent_cancels_the_child(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A cancelled parent stops its child run, which is recorded as cancelled too."""
    run_id = app.start(workflow(write_workflow), "reviewed", topic="t")
    app.drive(run_id)
    child = only_child(app, run_id)
    app.cancel(run_id, "no longer needed")
    app.drive(run_id)
    assert app.state(run_id).status is RunStatus.CANCELLED
    assert app.state(child).status is RunStatus.CANCELLED
    assert f"parent run {run_id}" in (app.state(child).failure or "")


def test_a_failed_child_fails_the_attempt_and_a_retry_starts_a_new_child(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Each attempt of the worker is its own child run; the last failure fails the parent."""
    path = write_workflow(f"""
        parent:
          phases:
            - id: delegate
              workers:
                - {{role: sub, pipeline: broken, retries: 1, backoff: {{initial: 0}}, final: true}}
        broken:
          phases:
            - id: only
              workers:
                - {{role: crash, final: true, command: ['{PY}', '-c', 'raise SystemExit(3)']}}
        """)
    run_id = app.start(path, "parent", topic="t")
    state = app.drive(run_id)
    assert state.status is RunStatus.FAILED
    children = [child_run_id(run_id, "sub@1", attempt) for attempt in (1, 2)]
    assert [app.state(c).status for c in children] == [RunStatus.FAILED] * 2
    assert "child run" in (state.failure or "")


def test_a_child_waiting_for_a_signal_lists_its_parent_waiting_and_takes_the_parents_signal(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """While the child waits for a signal the parent is listed as waiting for the child; a
    signal sent to the parent that only the child waits for reaches the child."""
    run_id = app.start(workflow(write_workflow), "waiting", topic="t")
    child = only_child(app, run_id)
    seen: dict[str, object] = {}

    async def send_when_waiting() -> None:
        while app.store.get_run(run_id).summary.status != "waiting":
            await asyncio.sleep(0.02)
        seen["view"] = app.status(run_id)["waiting"]
        seen["receipt"] = app.signal(run_id, "go", {"where": "north"}).run_id

    async def both() -> None:
        sender = asyncio.create_task(send_when_waiting())
        await app.drive_async(run_id)
        await sender

    asyncio.run(both())
    assert seen["view"] == {
        "for": "child",
        "child": child,
        "detail": f"run {child} waits for signal 'go'",
    }
    assert seen["receipt"] == child
    assert app.state(run_id).status is RunStatus.DELIVERED
    assert (app.run_dir(run_id) / "final.md").read_text() == "went north"


def test_what_the_child_spends_counts_toward_the_parents_budget(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A parent whose only spender is its child reaches its token budget with the child's."""
    path = write_workflow("""
        parent:
          budget: {max_tokens: 1}
          phases:
            - id: delegate
              workers:
                - {role: sub, pipeline: spender, final: true}
        spender:
          phases:
            - id: only
              workers:
                - {role: talker, model: offline-model, final: true}
        """)
    run_id = app.start(path, "parent", topic="t")
    state = app.drive(run_id)
    assert state.status is RunStatus.FAILED
    assert "budget exceeded" in (state.failure or "") and "reached the budget of 1" in (
        state.failure or ""
    )
    assert app.state(child_run_id(run_id, "sub@1", 1)).status is RunStatus.DELIVERED
