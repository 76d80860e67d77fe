"""A running child run's spend reaches its parent's cost and budget while it runs, and a child
stopped with its parent is still paid for."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from interlock import Interlock, RunStatus
from interlock.core.subpipelines import child_run_id

from .conftest import WriteWorkflow

# The child spends (a model call), then waits for a signal nobody sends; it fails after the
# wait's timeout when nothing stopped it first.
FLOW = """
parent:
  budget: {max_tokens: 1}
  phases:
    - id: delegate
      workers:
        - {role: sub, pipeline: spender, final: true}
unbounded:
  phases:
    - id: delegate
      workers:
        - {role: sub, pipeline: spender, final: true}
spender:
  phases:
    - id: talk
      workers:
        - {role: talker, model: offline-model}
    - id: ship
      wait_for: {signal: go, timeout: 4}
      workers:
        - {role: shipper, model: offline-model, final: true}
"""


def kinds(app: Interlock, run_id: str) -> list[str]:
    """The kinds of a run's recorded events, in order."""
    return [e.kind for e in app.events(run_id)]


def test_a_parent_over_budget_by_its_running_childs_spend_fails_and_cancels_the_child(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The parent's budget sees what its child spent while the child still waits: it fails
    at once (not when the child ends), the child is cancelled, and the spend counts once."""
    run_id = app.start(write_workflow(FLOW), "parent", topic="t")
    state = app.drive(run_id)
    child = child_run_id(run_id, "sub@1", 1)
    child_state = app.state(child)
    assert state.status is RunStatus.FAILED
    assert "budget exceeded" in (state.failure or "")
    assert child_state.status is RunStatus.CANCELLED
    assert f"parent run {run_id} failed" in (child_state.failure or "")
    parent_kinds = kinds(app, run_id)
    assert parent_kinds.index("child_spent") < parent_kinds.index("run_failed")
    # The final spend of the cancelled child replaced what was counted while it ran.
    assert parent_kinds.count("usage_recorded") == 1
    assert child_state.tokens > 0
    assert state.tokens == child_state.tokens == state.tasks["sub@1"].tokens
    assert state.tasks["sub@1"].child_spend == {}


def test_a_cancelled_parent_resumed_later_records_what_its_cancelled_child_spent(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A parent cancelled while no process watched its child (it was let go) still records
    the child's spend once the child has stopped: nothing the child spent is lost."""
    path = write_workflow("""
        parent:
          phases:
            - id: delegate
              workers:
                - {role: sub, pipeline: checked, final: true}
        checked:
          phases:
            - id: draft
              pause_after: true
              workers:
                - {role: drafter, model: offline-model}
            - id: write
              workers:
                - {role: writer, model: offline-model, final: true}
        """)
    run_id = app.start(path, "parent", topic="t")
    paused = app.drive(run_id)
    child = child_run_id(run_id, "sub@1", 1)
    assert paused.status is RunStatus.PAUSED and paused.tokens == app.state(child).tokens > 0
    app.cancel(run_id, "no longer needed")
    state = app.drive(run_id)
    child_state = app.state(child)
    assert state.status is RunStatus.CANCELLED and child_state.status is RunStatus.CANCELLED
    assert state.tokens == child_state.tokens > 0
    assert kinds(app, run_id).count("usage_recorded") == 1
    app.drive(run_id)  # taken again: the spend is recorded already, never twice
    assert kinds(app, run_id).count("usage_recorded") == 1
    assert app.state(run_id).tokens == child_state.tokens


def test_status_shows_a_running_childs_spend_so_far(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """While the child waits, `interlock status` of the parent names the child with what it
    has spent so far, and the parent's cost already counts it."""
    run_id = app.start(write_workflow(FLOW), "unbounded", topic="t")
    child = child_run_id(run_id, "sub@1", 1)
    seen: dict[str, object] = {}

    async def look_while_waiting() -> None:
        while "child_spent" not in kinds(app, run_id):
            assert not app.state(run_id).status.ended, "the child's spend was never recorded"
            await asyncio.sleep(0.02)
        seen["view"] = app.status(run_id)
        command = [sys.executable, "-m", "interlock", "--home", str(tmp_path / "home")]
        seen["cli"] = await asyncio.to_thread(
            subprocess.run,
            [*command, "status", run_id],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    async def both() -> None:
        looker = asyncio.create_task(look_while_waiting())
        await app.drive_async(run_id)
        await looker

    asyncio.run(both())
    view = seen["view"]
    assert isinstance(view, dict)
    spent = view["children"]["sub@1"]
    assert spent["run"] == child and spent["tokens"] > 0
    assert view["tokens"] == spent["tokens"]
    result = seen["cli"]
    assert isinstance(result, subprocess.CompletedProcess)
    assert result.returncode == 0, result.stderr
    assert f"child run {child} (sub@1) " in result.stdout
    assert f"{spent['tokens']} tokens spent so far" in result.stdout
    # Nobody sent the signal: the child failed, and its final spend replaced the running one.
    final = app.state(run_id)
    assert final.status is RunStatus.FAILED
    assert final.tokens == app.state(child).tokens == spent["tokens"]
    assert final.tasks["sub@1"].child_spend == {}
