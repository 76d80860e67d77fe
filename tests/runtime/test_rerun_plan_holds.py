"""`rerun --dry-run` of pipelines whose runs are held before or between phases: by a
concurrency key's slot, a signal or a delay. The plan goes past each hold as the run would."""

from __future__ import annotations

from interlock import Interlock, RunStatus

from .conftest import WriteWorkflow

SLOTS = """
demo:
  inputs:
    customer: acme
  concurrency: {key: inputs.customer, limit: 1}
  phases:
    - id: one
      workers:
        - {role: a, command: ["sh", "-c", "echo A > {output}"]}
    - id: two
      workers:
        - {role: b, final: true, reads: [a.md], command: ["sh", "-c", "cat {read:a.md} > {output}"]}
"""

WAITS = """
demo:
  phases:
    - id: one
      workers:
        - {role: a, command: ["sh", "-c", "echo A > {output}"]}
    - id: two
      wait_for: {signal: go}
      workers:
        - {role: b, reads: [a.md], command: ["sh", "-c", "cat {read:a.md} > {output}"]}
    - id: three
      delay: 1
      workers:
        - {role: c, final: true, reads: [b.md], command: ["sh", "-c", "cat {read:b.md} > {output}"]}
"""


def test_dry_run_of_a_pipeline_with_a_concurrency_key_plans_every_task(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A rerun that would wait for a slot is planned as if it had one: every task is listed."""
    first = app.run(write_workflow(SLOTS), "demo", topic="t")
    assert first.status is RunStatus.DELIVERED
    plan = app.plan_rerun(first.run_id, from_phase="two")
    assert [(t.task_id, t.reuse) for t in plan.tasks] == [("a@1", True), ("b@1", False)]


def test_dry_run_goes_past_a_signal_and_a_delay_as_the_source_run_did(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The signal the source received arrives again in the plan and the delay passes, so
    the tasks after them are planned, and the notes say so."""
    run_id = app.start(write_workflow(WAITS), "demo", topic="t")
    app.signal(run_id, "go", {"ok": True})
    assert app.drive(run_id).status is RunStatus.DELIVERED
    plan = app.plan_rerun(run_id, from_phase="three")
    assert [(t.task_id, t.reuse) for t in plan.tasks] == [
        ("a@1", True),
        ("b@1", True),
        ("c@1", False),
    ]
    assert any("signal 'go'" in note for note in plan.notes)
    assert any("delay" in note for note in plan.notes)
