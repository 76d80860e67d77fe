"""Reruns: a new run that carries its source run's matching outputs over and runs the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock import Interlock, RunStatus
from interlock.errors import UsageError
from interlock.runtime.reuse import Reuser

from .conftest import WriteWorkflow

# Each worker appends its role to calls.log in the workflow's folder, so a test can count
# what really ran; outputs carry a nonce so a rerun that ran again is visible in the text.
PIPELINE = """
demo:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["sh", "-c", "echo A-$$ > {output}; echo a >> {workflow_dir}/calls.log"]
        - role: b
          command: ["sh", "-c", "echo B-$$ > {output}; echo b >> {workflow_dir}/calls.log"]
    - id: synth
      workers:
        - role: s
          final: true
          reads: [a.md, b.md]
          task: "{{ topic }}: combine"
          command: ["sh", "-c", "cat $0 $1 > $2; echo s >> {workflow_dir}/calls.log",
                    "{input:a.md}", "{input:b.md}", "{output}"]
"""


def calls(workflow: Path) -> list[str]:
    """What ran since the log was last cleared (and clear it)."""
    log = workflow.parent / "calls.log"
    text = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    return sorted(text.split())


def reused(app: Interlock, run_id: str) -> dict[str, str | None]:
    """Task id -> the run/task it was reused from (None: it ran)."""
    return {t.task_id: t.reused_from for t in app.state(run_id).tasks.values()}


def test_rerun_from_a_phase_reuses_what_comes_before_it(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """`--from synth` carries both collectors over and runs only the synthesis."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED and calls(workflow) == ["a", "b", "s"]
    new = app.rerun(first.run_id, from_phase="synth")
    state = app.drive(new)
    assert state.status is RunStatus.DELIVERED
    assert calls(workflow) == ["s"]
    assert reused(app, new) == {
        "a@1": f"{first.run_id}/a@1",
        "b@1": f"{first.run_id}/b@1",
        "s@1": None,
    }
    source_dir, new_dir = app.run_dir(first.run_id), app.run_dir(new)
    assert (new_dir / "a.md").read_text() == (source_dir / "a.md").read_text()
    assert state.rerun_of == first.run_id and state.rerun_from == "synth"


def test_rerun_without_changes_reuses_everything_and_calls_nothing(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A plain rerun of a delivered run matches every task: nothing runs, the result is equal."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    calls(workflow)
    state = app.drive(app.rerun(first.run_id))
    assert state.status is RunStatus.DELIVERED and calls(workflow) == []
    assert all(t.reused_from for t in state.tasks.values())
    final = app.final_path(state.run_id)
    assert final is not None and final.read_text() == app.final_path(first.run_id).read_text()  # type: ignore[union-attr]


def test_a_changed_topic_reruns_what_sees_it(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """Command workers see the topic, so a new topic runs every task."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    calls(workflow)
    app.drive(app.rerun(first.run_id, topic="other"))
    assert calls(workflow) == ["a", "b", "s"]


def test_an_edited_worker_reruns_it_and_its_readers_only(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Editing worker b's command runs b and s (which reads b's changed output), not a."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    calls(workflow)
    edited = tmp_path / "edited.yaml"
    edited.write_text(workflow.read_text().replace("echo B-$$", "echo BB-$$"))
    new = app.rerun(first.run_id, workflow=edited)
    assert app.drive(new).status is RunStatus.DELIVERED
    assert calls(workflow) == ["b", "s"]
    assert reused(app, new)["a@1"] == f"{first.run_id}/a@1"


def test_an_edited_script_or_call_module_reruns_its_worker_and_its_readers(
    app: Interlock, write_workflow: WriteWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow unchanged, the script a command runs (beside the workflow) or the module
    of a `call:` target edited: the rerun runs that worker again, and its readers, not the
    rest, and says why; an untouched script's worker is reused."""
    workflow = write_workflow(
        """
demo:
  phases:
    - id: collect
      workers:
        - role: a
          command: ["{python}", "{workflow_dir}/make_a.py", "{output}"]
        - role: b
          command: ["{python}", "{workflow_dir}/make_b.py", "{output}"]
        - role: c
          call: "edited_calls:make_c"
    - id: synth
      workers:
        - role: s
          final: true
          reads: [a.md, b.md, c.md]
          command: ["sh", "-c", "cat $0 $1 $2 > $3", "{input:a.md}", "{input:b.md}",
                    "{input:c.md}", "{output}"]
"""
    )
    folder = workflow.parent
    for name, text in (("make_a.py", "A1"), ("make_b.py", "B1")):
        (folder / name).write_text(f"import sys\nopen(sys.argv[1], 'w').write('{text}')\n")
    module = folder / "edited_calls.py"
    module.write_text("def make_c(context):\n    return 'C1'\n")
    monkeypatch.syspath_prepend(str(folder))
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED
    assert (app.run_dir(first.run_id) / "final.md").read_text() == "A1B1C1"

    same = app.rerun(first.run_id)
    assert app.drive(same).status is RunStatus.DELIVERED
    assert all(source is not None for source in reused(app, same).values())

    (folder / "make_b.py").write_text("import sys\nopen(sys.argv[1], 'w').write('B2')\n")
    edited = app.rerun(first.run_id)
    assert app.drive(edited).status is RunStatus.DELIVERED
    assert (app.run_dir(edited) / "final.md").read_text() == "A1B2C1"
    assert {t for t, source in reused(app, edited).items() if source is None} == {"b@1", "s@1"}

    import edited_calls  # type: ignore[import-not-found]  # the module as the first run imported it: its file is what counts

    module.write_text("def make_c(context):\n    return 'C2'\n")
    monkeypatch.setattr(edited_calls, "make_c", lambda context: "C2")
    called = app.rerun(first.run_id)
    assert app.drive(called).status is RunStatus.DELIVERED
    ran = {t for t, source in reused(app, called).items() if source is None}
    assert ran == {"b@1", "c@1", "s@1"}  # b against the first run's script, c edited now


def test_a_failed_run_reruns_only_what_failed(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Redrive: after a failure is fixed, the rerun keeps the completed tasks."""
    # One after another, so a has completed before b fails (in parallel, b's failure may
    # cancel a first, and then a rightly runs again).
    in_order = PIPELINE.replace("- id: collect\n", "- id: collect\n      mode: sequential\n")
    assert "sequential" in in_order
    broken = in_order.replace("echo B-$$ > {output}", "exit 3")
    workflow = write_workflow(broken)
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.FAILED
    assert app.state(first.run_id).tasks["a@1"].status.value == "completed"
    calls(workflow)
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(in_order.strip())
    new = app.rerun(first.run_id, workflow=fixed)
    assert app.drive(new).status is RunStatus.DELIVERED
    assert calls(workflow) == ["b", "s"]


def test_the_source_run_is_never_modified(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A rerun adds nothing to its source's history and leaves its files alone."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    before = [(e.seq, e.kind) for e in app.events(first.run_id)]
    files = {p.name: p.read_bytes() for p in app.run_dir(first.run_id).iterdir() if p.is_file()}
    app.drive(app.rerun(first.run_id, from_phase="synth"))
    assert [(e.seq, e.kind) for e in app.events(first.run_id)] == before
    after = {p.name: p.read_bytes() for p in app.run_dir(first.run_id).iterdir() if p.is_file()}
    assert after == files


def test_reused_tasks_cost_nothing(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A reuse folds as a completion at zero cost and zero tokens."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    state = app.drive(app.rerun(first.run_id))
    assert state.cost_usd == 0 and state.tokens == 0
    kinds = [e.kind for e in app.events(state.run_id)]
    assert kinds.count("task_reused") == 3 and "task_started" not in kinds


def test_bad_reruns_are_refused_and_record_nothing(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """An unknown phase, an unknown run, and a run that has not ended are clear errors."""
    workflow = write_workflow(PIPELINE.replace("id: synth", "id: synth\n      pause_after: true"))
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.PAUSED
    runs = app.store.find_runs("")
    with pytest.raises(UsageError, match="still paused"):
        app.rerun(first.run_id)
    app.cancel(first.run_id)
    app.drive(first.run_id)
    with pytest.raises(UsageError, match="no such phase; its phases are collect, synth"):
        app.rerun(first.run_id, from_phase="nope")
    with pytest.raises(UsageError, match="no run matches"):
        app.rerun("nothing-here")
    assert app.store.find_runs("") == runs


def test_a_source_without_fingerprints_runs_every_task(
    app: Interlock, write_workflow: WriteWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks of a source recorded before fingerprints existed cannot match: they all run."""
    workflow = write_workflow(PIPELINE)
    with monkeypatch.context() as patch:  # record the source as an older interlock did
        patch.setattr(Reuser, "stamp", lambda self, state, event: event)
        first = app.run(workflow, "demo", topic="t")
    assert all(t.fingerprint is None for t in first.tasks.values())
    calls(workflow)
    new = app.rerun(first.run_id)
    assert app.drive(new).status is RunStatus.DELIVERED
    assert calls(workflow) == ["a", "b", "s"]


BRANCHING = """
demo:
  phases:
    - id: score
      workers:
        - role: a
          command: ["sh", "-c", "echo '{\\"score\\": SCORE}' > {output}"]
          extract: {score: {json: score, type: number}}
      next:
        - {if: "a.score > 2", goto: high}
        - {goto: low}
    - id: low
      workers:
        - {role: l, command: ["sh", "-c", "echo low > {output}"]}
      next:
        - {goto: high}
    - id: high
      workers:
        - {role: h, final: true, reads: ["a.md"], command: ["sh", "-c", "echo high > {output}"]}
"""


def test_diff_shows_tasks_values_outputs_and_the_rule_that_fired_differently(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """Two runs whose first output differs: the diff names the changed value, the output
    text, the branch each took by which rule, and the task only one of them ran."""
    first = app.run(write_workflow(BRANCHING.replace("SCORE", "3")), "demo", topic="t")
    edited = tmp_path / "edited.yaml"
    edited.write_text(BRANCHING.replace("SCORE", "1"))
    second = app.drive(app.rerun(first.run_id, workflow=edited))
    result = app.diff(first.run_id, second.run_id, outputs=True)
    rows = {t.task_id: t for t in result.tasks}
    assert (rows["a@1"].a, rows["a@1"].b, rows["a@1"].output) == ("ran", "ran", "changed")
    assert rows["a@1"].values == {"score": [3, 1]}
    assert '-{"score": 3}' in rows["a@1"].text_diff
    assert (rows["l@1"].a, rows["l@1"].b) == ("-", "ran")
    assert result.decisions == [
        "after phase 'score' (visit 1): A went to 'high' by rule 1 (a.score > 2; a.score=3.0); "
        "B went to 'low' by rule 2 (always; a.score=1.0)",
        "after phase 'low' (visit 1): A never got there; B went to 'high' by rule 1 (always)",
    ]
    assert result.header["rerun_of"] == [None, first.run_id]


def test_diff_of_a_rerun_shows_what_was_reused(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A rerun from the last phase compares as reused / reused / ran (and s, rebuilt from the
    same inputs, came out the same)."""
    workflow = write_workflow(PIPELINE)
    first = app.run(workflow, "demo", topic="t")
    second = app.drive(app.rerun(first.run_id, from_phase="synth"))
    result = app.diff(first.run_id, second.run_id)
    assert [(t.task_id, t.a, t.b, t.output) for t in result.tasks] == [
        ("a@1", "ran", "reused", "same"),
        ("b@1", "ran", "reused", "same"),
        ("s@1", "ran", "ran", "same"),
    ]
    assert result.decisions == []


FAN_OUT = """
demo:
  phases:
    - id: plan
      workers:
        - role: planner
          command: ["sh", "-c", "echo '{\\"items\\": [\\"x\\", \\"ITEM\\", \\"z\\"]}' > {output}"]
          extract: {items: {json: items, type: list}}
    - id: write
      for_each: planner.items
      workers:
        - role: writer
          task: "Write about {{ item }}"
          command: ["sh", "-c", "echo $0 > $1; echo w-$0 >> {workflow_dir}/calls.log",
                    "{item}", "{output}"]
    - id: merge
      workers:
        - role: editor
          final: true
          reads: [writer.md]
          command: ["sh", "-c", "echo e >> {workflow_dir}/calls.log; cat $@ > {output}",
                    "sh", "{inputs}"]
"""

LOOP = """
demo:
  phases:
    - id: draft
      workers:
        - role: d
          command: ["sh", "-c", "echo draft-{topic} > {output}; echo d >> {workflow_dir}/calls.log"]
    - id: review
      workers:
        - role: r
          reads: [d.md]
          command: ["sh", "-c", "echo '{\\"ok\\": false}' > {output};
                    echo r >> {workflow_dir}/calls.log"]
          extract: {ok: {json: ok, type: bool}}
      next:
        - {if: "!r.ok", goto: draft, max_visits: 3}
    - id: publish
      workers:
        - role: p
          final: true
          reads: [d.md]
          command: ["sh", "-c", "cp $0 $1", "{input:d.md}", "{output}"]
"""


def test_for_each_matches_item_by_item(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A changed list item reruns only that item's writer (and the planner and the editor
    that read what changed); the other items are reused."""
    workflow = write_workflow(FAN_OUT.replace("ITEM", "y"))
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED
    calls(workflow)
    edited = tmp_path / "edited.yaml"
    edited.write_text(FAN_OUT.replace("ITEM", "Y"))
    new = app.rerun(first.run_id, workflow=edited)
    assert app.drive(new).status is RunStatus.DELIVERED
    assert calls(workflow) == ["e", "w-Y"]
    fates = {k: v is not None for k, v in reused(app, new).items()}
    assert fates == {
        "planner@1": False,
        "writer@1.0": True,
        "writer@1.1": False,
        "writer@1.2": True,
        "editor@1": False,
    }


def test_a_fan_out_over_no_items_names_itself_when_its_output_is_required(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The planner lists nothing: the editor, which must read writer.md, fails saying that
    the fan-out had no items and how to read it optionally, not only that the file is
    missing; read optionally, the run delivers."""
    empty = FAN_OUT.replace('[\\"x\\", \\"ITEM\\", \\"z\\"]', "[]")
    assert empty != FAN_OUT
    failed = app.run(write_workflow(empty), "demo", topic="t")
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert "phase 'write' fans out over planner.items, which held no items" in failed.failure
    assert "mark the read optional ('writer.md?')" in failed.failure
    optional = empty.replace("reads: [writer.md]", 'reads: ["writer.md?"]')
    assert app.run(write_workflow(optional), "demo", topic="t").status is RunStatus.DELIVERED


def test_a_plan_that_cannot_see_past_a_branch_does_not_call_it_a_failure(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A run cancelled at its pause, before its reviewer ever ran: the plan of its rerun says
    it cannot foresee the branch that reads the review's score, not that the rerun fails."""
    workflow = write_workflow(
        """
demo:
  phases:
    - id: draft
      pause_after: true
      workers:
        - {role: w, command: [sh, -c, "echo draft > {output}"]}
    - id: review
      workers:
        - role: r
          command: [sh, -c, "echo 'score: 9' > {output}"]
          reads: [w.md]
          extract: {score: {regex: "score: ([0-9]+)", type: number}}
      next:
        - {if: "r.score < 8", goto: draft, max_visits: 2}
    - id: done
      workers:
        - role: f
          final: true
          reads: [w.md]
          command: [sh, -c, "cat $0 > {output}", "{read:w.md}"]
"""
    )
    paused = app.run(workflow, "demo", topic="t")
    assert paused.status is RunStatus.PAUSED
    app.cancel(paused.run_id)
    assert app.drive(paused.run_id).status is RunStatus.CANCELLED
    notes = app.plan_rerun(paused.run_id).notes
    assert any(note.startswith("cannot foresee beyond this point") for note in notes), notes
    assert not any("ends failed" in note for note in notes), notes


def test_loops_match_visit_by_visit(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A rerun of a run that looped reuses every visit; from the review phase on, the first
    draft is reused and every later visit runs."""
    workflow = write_workflow(LOOP)
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED
    assert sorted(first.tasks) == ["d@1", "d@2", "d@3", "p@1", "r@1", "r@2", "r@3"]
    calls(workflow)
    same = app.drive(app.rerun(first.run_id))
    assert calls(workflow) == [] and all(t.reused_from for t in same.tasks.values())
    forced = app.drive(app.rerun(first.run_id, from_phase="review"))
    assert calls(workflow) == ["d", "d", "r", "r", "r"]
    assert [t for t, v in reused(app, forced.run_id).items() if v] == ["d@1"]


def test_a_data_file_named_by_path_is_not_code_and_an_edited_script_is_named(
    app: Interlock, write_workflow: WriteWorkflow, tmp_path: Path
) -> None:
    """A log the command appends to (beside the workflow and elsewhere, by absolute path)
    changes every run without making the worker run again, under a rerun and the cache;
    an edited script makes it run, and the plan names that script."""
    data = tmp_path / "elsewhere" / "app.log"
    data.parent.mkdir()
    data.write_text("")
    workflow = write_workflow(
        f"""
demo:
  cache: true
  phases:
    - id: collect
      workers:
        - role: a
          final: true
          command: ["{{python}}", "{{workflow_dir}}/make_a.py", "{{output}}",
                    "{{workflow_dir}}/calls.log", "{data}"]
"""
    )
    script = workflow.parent / "make_a.py"
    script.write_text(
        "import sys\nopen(sys.argv[1], 'w').write('A')\n"
        "for log in sys.argv[2:]:\n    open(log, 'a').write('a\\n')\n"
    )
    first = app.run(workflow, "demo", topic="t")
    assert first.status is RunStatus.DELIVERED and calls(workflow) == ["a"]
    assert data.read_text() == "a\n"
    plan = app.plan_rerun(first.run_id)
    assert [(t.task_id, t.reuse) for t in plan.tasks] == [("a@1", True)], plan.tasks
    second = app.run(workflow, "demo", topic="t")  # the cache, with both logs changed
    assert calls(workflow) == [] and second.tasks["a@1"].reused_from == f"{first.run_id}/a@1"

    script.write_text(script.read_text().replace("'A'", "'A2'"))
    [task] = app.plan_rerun(first.run_id).tasks
    assert not task.reuse and task.changed == ["worker"]
    assert task.why == f"runs: changed a file it runs: {script}"
    third = app.run(workflow, "demo", topic="t")
    assert calls(workflow) == ["a"] and third.tasks["a@1"].reused_from is None

    script.unlink()  # a script gone is not said to have changed: the task would fail
    [task] = app.plan_rerun(third.run_id).tasks
    assert not task.reuse
    assert task.why == (
        f"runs: changed a file it runs: {script}, which is not there now: the task would fail"
    )
