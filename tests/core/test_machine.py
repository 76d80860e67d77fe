"""The run step: observations in, events and effects out, with no I/O."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import RuleName
from interlock.core.state import RunState, RunStatus, fold
from interlock.engine import RunMachine, Step
from interlock.engine import effects as fx
from interlock.engine import inputs as obs

from .runs import pipeline_of, worker

ENGINE = Path(__file__).resolve().parents[2] / "src" / "interlock" / "engine"


def two_phases(pause: bool = False) -> RunMachine:
    """A writer, then a final editor that reads its draft."""
    write: dict[str, Any] = {"id": "write", "workers": [worker("writer", output="draft.md")]}
    if pause:
        write["pause_after"] = True
    edit = {"id": "edit", "workers": [worker("editor", reads=["draft.md"], final=True)]}
    return RunMachine(pipeline_of({"phases": [write, edit]}))


def created() -> RunState:
    """A run that was just created."""
    return fold(
        [
            ev.RunCreated(
                at=0.0, run_id="r", pipeline="p", definition_hash="0" * 64, topic="t", inputs={}
            )
        ]
    )


def kinds(step: Step) -> list[str]:
    """The kinds of a step's events, in order."""
    return [r.event.kind for r in step.events]


def test_a_new_run_dispatches_its_first_phase_and_asks_for_its_worker() -> None:
    """The first step records the phase and its dispatch, and starts the attempt."""
    machine, state = two_phases(), created()
    step = machine.step(state, [obs.Tick()], 0.0)
    assert kinds(step) == ["phase_started", "task_dispatched"]
    assert step.events[0].rule is RuleName.START
    assert step.of(fx.StartAttempt) == [
        fx.StartAttempt(task_id="writer@1", attempt=1, child=False, may_reuse=True)
    ]
    assert isinstance(step.effects[-1], fx.RefreshStatus)


def test_a_running_attempt_is_not_started_again() -> None:
    """An attempt whose worker runs gets no second start."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    handles = obs.Handles(running={"writer@1": 1}, since=state.events)
    assert machine.step(state, [], 1.0, handles=handles).of(fx.StartAttempt) == []


def test_an_output_held_in_memory_is_hashed_stored_and_written_after_its_completion() -> None:
    """The completion names the file and its hash; the body is stored once and written once."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    body = b"a draft"
    completed = ev.TaskCompleted(
        at=1.0, task_id="writer@1", attempt=1, artifact="", sha256="", size=0
    )
    step = machine.step(state, [obs.Reported(event=completed, body=body)], 1.0)
    sha = hashlib.sha256(body).hexdigest()
    assert kinds(step)[:2] == ["task_started", "task_completed"]
    done = step.events[1].event
    assert isinstance(done, ev.TaskCompleted)
    assert (done.artifact, done.sha256, done.size) == ("draft.md", sha, len(body))
    assert step.stored == ((sha, body),)
    assert step.of(fx.WriteOutput) == [fx.WriteOutput(artifact="draft.md", body=body, sha256=sha)]
    assert [s.task_id for s in step.of(fx.StartAttempt)] == ["editor@1"]


def test_a_stale_report_is_dropped_but_its_cost_is_kept() -> None:
    """A result for an attempt that is no longer current records only what it cost."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    cancel = obs.PersonCommand(kind="cancel", message="stop", by="me")
    machine.step(state, [cancel], 1.0)
    late = ev.TaskFailed(at=2.0, task_id="writer@1", attempt=1, error="x", usage={"cost_usd": 0.5})
    step = machine.step(state, [obs.Reported(event=late)], 2.0)
    assert kinds(step) == ["usage_recorded"]
    assert step.events[0].why == "answered after it stopped counting"


def test_a_refused_command_says_why_and_records_nothing() -> None:
    """Approving a run that is not paused is refused with a message for the person."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    step = machine.step(state, [obs.PersonCommand(kind="approve", by="me")], 1.0)
    assert step.events == () and len(step.refused) == 1 and "not paused" in step.refused[0]


def paused_after_writer(machine: RunMachine) -> RunState:
    """A run of `two_phases(pause=True)` paused after its writer completed."""
    state = created()
    machine.step(state, [], 0.0)
    done = ev.TaskCompleted(at=1.0, task_id="writer@1", attempt=1, artifact="", sha256="", size=0)
    machine.step(state, [obs.Reported(event=done, body=b"v1")], 1.0)
    assert state.status is RunStatus.PAUSED
    return state


def test_an_edit_is_recorded_with_its_body_and_written_after() -> None:
    """An edit at a review stores the new text with its event and writes it once recorded."""
    machine = two_phases(pause=True)
    state = paused_after_writer(machine)
    message = json.dumps({"output": "draft.md", "body": "v2"})
    step = machine.step(state, [obs.PersonCommand(kind="edit", message=message, by="me")], 2.0)
    assert kinds(step) == ["output_edited"] and step.events[0].why == "edit from me"
    sha = hashlib.sha256(b"v2").hexdigest()
    assert step.stored == ((sha, b"v2"),)
    assert step.of(fx.WriteOutput) == [fx.WriteOutput(artifact="draft.md", body=b"v2", sha256=sha)]


def test_a_reject_sends_the_run_back_and_starts_the_phase_again() -> None:
    """A reject records the rejection, then the engine starts the phase's next visit."""
    machine = two_phases(pause=True)
    state = paused_after_writer(machine)
    message = json.dumps({"to": "write", "feedback": "shorter"})
    step = machine.step(state, [obs.PersonCommand(kind="reject", message=message, by="me")], 2.0)
    assert kinds(step)[0] == "rejected" and step.events[0].why == "reject from me"
    assert RuleName.REJECT in [r.rule for r in step.events]
    assert [s.task_id for s in step.of(fx.StartAttempt)] == ["writer@2"]


def test_delivery_places_final_md_from_the_body_of_the_same_step() -> None:
    """The final worker's output, held by the step, is the body of final.md."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    for task_id, body, at in (("writer@1", b"d", 1.0), ("editor@1", b"final", 2.0)):
        done = ev.TaskCompleted(at=at, task_id=task_id, attempt=1, artifact="", sha256="", size=0)
        step = machine.step(state, [obs.Reported(event=done, body=body)], at)
    assert state.status is RunStatus.DELIVERED
    sha = hashlib.sha256(b"final").hexdigest()
    assert step.of(fx.PlaceFinal) == [
        fx.PlaceFinal(artifact=state.delivered or "", sha256=sha, body=b"final")
    ]
    placed = obs.Handles(final_placed=True, children_stopped=True, since=state.events)
    assert machine.step(state, [], 3.0, handles=placed).of(fx.PlaceFinal) == []


def test_an_ended_run_stops_its_workers_and_children() -> None:
    """A cancelled run asks every worker still running, and its child runs, to stop."""
    machine, state = two_phases(), created()
    machine.step(state, [], 0.0)
    handles = obs.Handles(running={"writer@1": 1}, since=state.events)
    cancel = obs.PersonCommand(kind="cancel", message="stop", by="me")
    step = machine.step(state, [cancel], 1.0, handles=handles)
    assert step.of(fx.StopChildren) == [fx.StopChildren()]
    assert step.of(fx.StopWorkers) == [fx.StopWorkers(task_ids=("writer@1",))]


def test_granted_slots_are_recorded_in_their_place() -> None:
    """Slot grants (folded by the slot keeper) come after observations, before decisions."""
    machine, state = two_phases(), created()
    granted = ev.Warned(at=0.0, message="stand-in for a grant")
    step = machine.step(state, [obs.Granted(events=((granted, "slot", "free"),))], 0.0)
    assert step.events[0].event is granted and step.events[0].rule == "slot"
    assert kinds(step)[1:] == ["phase_started", "task_dispatched"]


def test_the_same_inputs_make_the_same_step() -> None:
    """Two machines fed the same inputs at the same times make equal steps."""

    def play() -> list[Step]:
        machine, state = two_phases(), created()
        done = ev.TaskCompleted(
            at=1.0, task_id="writer@1", attempt=1, artifact="", sha256="", size=0
        )
        return [
            machine.step(state, [], 0.0),
            machine.step(state, [obs.Reported(event=done, body=b"x")], 1.0),
        ]

    assert play() == play()


def test_the_engine_imports_only_the_core_and_the_standard_library() -> None:
    """No module of `interlock.engine` imports the runtime, storage or anything else."""
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("interlock"):
                    assert name.startswith(("interlock.core", "interlock.engine")), (path, name)
                else:
                    assert name.split(".")[0] in {
                        "__future__",
                        "collections",
                        "dataclasses",
                        "enum",
                        "hashlib",
                        "typing",
                    }, (path, name)
