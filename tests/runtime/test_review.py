"""Edits and rejections at a review: what runs again, what does not, and what is refused."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tests.runtime.conftest import WriteWorkflow

from interlock import Interlock, register
from interlock.core.state import RunStatus
from interlock.errors import UsageError
from interlock.runtime.executors import TaskContext

CALLS: Counter[str] = Counter()
SEEN: dict[str, list[str]] = {}


def _worker(role: str):
    def work(ctx: TaskContext) -> str:
        CALLS[role] += 1
        read = [ctx.read(name) for name, _ in ctx.spec.reads]
        SEEN.setdefault(role, []).append(" | ".join(read))
        return f"{role} output {CALLS[role]} ({ctx.spec.task}) score: {CALLS[role]}\n"

    return work


@pytest.fixture(autouse=True)
def _workers() -> None:
    CALLS.clear()
    SEEN.clear()
    for role in ("a", "b", "s", "r", "p"):
        register(f"rv_{role}", _worker(role))


PIPELINE = """
    p:
      phases:
        - id: research
          workers: [{role: a, call: rv_a}, {role: b, call: rv_b}]
        - id: synth
          workers: [{role: s, call: rv_s, reads: [a.md, b.md]}]
        - id: review
          pause_after: true
          workers:
            - role: r
              call: rv_r
              reads: [s.md]
              extract: {score: {regex: "score: ([0-9]+)", type: number}}
        - id: publish
          workers: [{role: p, call: rv_p, reads: [r.md], final: true, task: "fb={{ feedback }}"}]
"""


def _paused(app: Interlock, write_workflow: WriteWorkflow) -> str:
    state = app.run(write_workflow(PIPELINE), topic="t")
    assert state.status is RunStatus.PAUSED
    return state.run_id


def _record(app: Interlock, run_id: str) -> None:
    """What `interlock edit` does after posting: let the driver record it (still paused)."""
    assert app.drive(run_id).status is RunStatus.PAUSED


def test_edit_reruns_exactly_the_tasks_that_read_the_old_version(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Editing a.md reruns s (reads it) and then r (reads s), never a or b; p reads the new r."""
    run_id = _paused(app, write_workflow)
    app.edit(run_id, "a.md", "A EDITED BY HAND\n", note="fix the figures")
    _record(app, run_id)
    assert (app.run_dir(run_id) / "a.md").read_text() == "A EDITED BY HAND\n"
    edited = [e for e in app.events(run_id) if e.kind == "output_edited"]
    assert len(edited) == 1 and edited[0].data["note"] == "fix the figures"
    assert edited[0].data["old_sha256"] != edited[0].data["sha256"]
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.PAUSED  # the new review, to be seen
    assert Counter(a=1, b=1, s=2, r=2) == CALLS
    app.approve(run_id)
    state = app.resume(run_id)
    assert state.status is RunStatus.DELIVERED
    assert Counter(a=1, b=1, s=2, r=2, p=1) == CALLS
    assert "A EDITED BY HAND" in SEEN["s"][1] and "s output 2" in SEEN["r"][1]
    assert "r output 2" in SEEN["p"][0]
    revised = [e for e in app.events(run_id) if e.rule == "revise"]
    assert [e.data["task_id"] for e in revised] == ["s@1", "r@1"]
    assert state.values["r"]["score"] == 2


def test_a_rerun_an_edit_caused_is_not_counted_as_a_retry(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """s and r made again after a.md was edited are re-runs, counted apart: retries stay 0."""
    run_id = _paused(app, write_workflow)
    app.edit(run_id, "a.md", "A EDITED BY HAND\n")
    _record(app, run_id)
    app.approve(run_id)
    app.resume(run_id)
    view = app.status(run_id)
    assert (view["retry_count"], view["reruns"]) == (0, 2)


def test_editing_the_reviewed_output_reruns_nothing(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """An edit of the output under review only changes what follows reads, and its values."""
    run_id = _paused(app, write_workflow)
    app.edit(run_id, "r", "reviewed by a person, score: 9\n")
    _record(app, run_id)
    assert app.state(run_id).values["r"]["score"] == 9
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.DELIVERED
    assert Counter(a=1, b=1, s=1, r=1, p=1) == CALLS
    assert SEEN["p"] == ["reviewed by a person, score: 9\n"]


def test_bad_edits_are_refused_and_change_nothing(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """An unknown output, a text its extract rejects and a run that is not paused: refused."""
    run_id = _paused(app, write_workflow)
    before = len(app.events(run_id))
    with pytest.raises(UsageError, match=r"has no output 'nope.md'; its outputs are a.md, b.md"):
        app.edit(run_id, "nope.md", "x")
    with pytest.raises(UsageError, match=r"fails its worker's extract.*nothing was changed"):
        app.edit(run_id, "r.md", "no score here")
    assert len(app.events(run_id)) == before and app.store.pending_commands(run_id) == []
    app.approve(run_id)
    app.resume(run_id)
    with pytest.raises(UsageError, match="is delivered, not paused"):
        app.edit(run_id, "a.md", "x")


def test_an_empty_edit_is_refused_as_an_empty_model_answer_is(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """An edit whose text is empty or only whitespace is refused, naming the output, and
    nothing is recorded (before: accepted, although an empty model answer is refused)."""
    run_id = _paused(app, write_workflow)
    before = len(app.events(run_id))
    for body in ("", " \n\t\n"):
        with pytest.raises(UsageError, match=r"the new a.md is empty \(or only whitespace\)"):
            app.edit(run_id, "a.md", body)
    assert len(app.events(run_id)) == before and app.store.pending_commands(run_id) == []


def test_reject_goes_back_with_feedback_and_is_bounded(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """A rejection starts the phase again as a new visit with {{ feedback }}; past
    max_rejections it is refused with the limit named."""
    path = write_workflow(PIPELINE.replace("phases:", "max_rejections: 1\n      phases:", 1))
    run_id = app.run(path, topic="t").run_id
    app.reject(run_id, "synth", "cite your sources")
    state = app.drive(run_id)
    assert state.status is RunStatus.PAUSED and state.visits["synth"] == 2
    assert state.feedback == "cite your sources"
    assert Counter(a=1, b=1, s=2, r=2) == CALLS
    assert (app.run_dir(run_id) / "s.v2.md").exists()
    rejected = [e for e in app.events(run_id) if e.kind == "rejected"]
    assert rejected[0].data == {
        "at": rejected[0].data["at"],
        "to": "synth",
        "feedback": "cite your sources",
        "by": rejected[0].data["by"],
        "v": 1,
    }
    with pytest.raises(UsageError, match=r"already rejected 1 time\(s\).*max_rejections: 1"):
        app.reject(run_id, "synth", "again")
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.DELIVERED
    assert SEEN["p"] and CALLS["p"] == 1
    final = (app.run_dir(run_id) / "final.md").read_text()
    assert "fb=cite your sources" in final


def test_bad_rejections_are_refused(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """An unknown phase and one that has not run are refused, naming what is allowed."""
    run_id = _paused(app, write_workflow)
    with pytest.raises(UsageError, match="has no phase 'synthesis'; phases are research, synth"):
        app.reject(run_id, "synthesis", "x")
    with pytest.raises(UsageError, match="phase 'publish' has not run yet"):
        app.reject(run_id, "publish", "x")
    assert app.store.pending_commands(run_id) == []


def test_a_hand_edit_is_never_overwritten(app: Interlock, write_workflow: WriteWorkflow) -> None:
    """A file changed by hand during a pause stops the approval with the command that
    records it; on resume it is kept beside as NAME.unrecorded, never lost."""
    run_id = _paused(app, write_workflow)
    s_md = app.run_dir(run_id) / "s.md"
    s_md.write_text("changed in my editor\n")
    with pytest.raises(UsageError, match=f"interlock edit {run_id} s.md --file"):
        app.approve(run_id)
    assert app.store.pending_commands(run_id) == []
    app.resume(run_id)  # the driver restores the recorded version, keeping the change
    assert (app.run_dir(run_id) / "s.md.unrecorded").read_text() == "changed in my editor\n"
    assert s_md.read_text().startswith("s output 1")
    app.edit(run_id, "s.md", Path(str(s_md) + ".unrecorded").read_text())
    _record(app, run_id)
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.PAUSED  # r ran again on it: shown first
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.DELIVERED
    assert SEEN["r"][-1] == "changed in my editor\n"


def test_a_hand_edit_recorded_from_the_file_itself_leaves_no_copy(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """The fix the refusal names, `edit RUN s.md --file <the run's s.md>`, then approve: the
    change is recorded and read, and no `.unrecorded` copy of it is left beside the file."""
    run_id = _paused(app, write_workflow)
    s_md = app.run_dir(run_id) / "s.md"
    s_md.write_text("changed in my editor\n")
    with pytest.raises(UsageError, match=f"interlock edit {run_id} s.md --file"):
        app.approve(run_id)
    app.edit(run_id, "s.md", s_md.read_text())
    _record(app, run_id)  # the driver takes the run again: it finds the file changed
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.PAUSED  # r ran again on it: shown first
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.DELIVERED
    assert SEEN["r"][-1] == "changed in my editor\n"
    folder = app.run_dir(run_id)
    assert (folder / "s.md").read_text() == "changed in my editor\n"
    assert sorted(p.name for p in folder.iterdir() if "unrecorded" in p.name) == []


def test_an_edit_upstream_of_a_paused_phase_shows_its_new_result_before_going_on(
    app: Interlock, write_workflow: WriteWorkflow
) -> None:
    """Paused after review, a person edits a.md (read by s, read by r) and approves: s and
    r run again, and the run pauses again after review, so that the person approves the
    review they now see; editing r.md itself (nothing of the phase runs again) goes on."""
    run_id = _paused(app, write_workflow)
    app.edit(run_id, "a.md", "A EDITED BY HAND\n")
    _record(app, run_id)
    app.approve(run_id)
    state = app.resume(run_id)
    assert state.status is RunStatus.PAUSED, state.status
    assert CALLS["s"] == 2 and CALLS["r"] == 2 and CALLS["p"] == 0
    assert "A EDITED BY HAND" in SEEN["s"][-1]
    app.edit(run_id, "r.md", "r looked at by a person score: 9\n")
    _record(app, run_id)
    app.approve(run_id)
    assert app.resume(run_id).status is RunStatus.DELIVERED
    assert CALLS["r"] == 2 and SEEN["p"][-1] == "r looked at by a person score: 9\n"


def test_feedback_is_part_of_what_a_task_depends_on() -> None:
    """The task a fingerprint covers is rendered with the rejection's feedback, so an output
    written for other feedback is never reused for this one."""
    from interlock.core.fingerprint import template_values
    from interlock.core.state import RunState, TaskState, TaskStatus
    from interlock.core.templates import render_task

    state = RunState(run_id="r", topic="t", feedback="shorter")
    task = TaskState(
        task_id="w@2", phase="p", role="w", visit=2, item=None, attempt=1,
        status=TaskStatus.DISPATCHED, model=None, dispatched_at=0.0,
    )  # fmt: skip
    assert render_task("fb={{ feedback }}", template_values(state, task)) == "fb=shorter"
