"""A person's review of a paused run: edit an output, or reject back to an earlier phase.

Both arrive as commands (`interlock edit`, `interlock reject`, the API) and are turned into
events here, purely, against the run's state and its pinned pipeline; what is refused comes
back as a message for the person. What follows an event is decided by the table in
`core.decide`: a rejection starts its phase again as a new visit (`RuleName.REJECT`), and an
edit makes every task that read the old version run again, in order, before the run goes on
(`RuleName.REVISE`), transitively for what those tasks produce.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from interlock.core import events as ev
from interlock.core.extract import ExtractionError, extract_values
from interlock.core.state import (
    TASK_COMPLETED,
    TASK_RETRY_WAIT,
    RunState,
    RunStatus,
    TaskState,
    task_id_for,
)
from interlock.core.templates import template_names
from interlock.core.validate import read_name
from interlock.core.workflow import Pipeline

EDIT_LIMIT = 1024 * 1024  # bytes: an edited output is stored in the ledger with its event


@dataclass(frozen=True, kw_only=True)
class EditRequest:
    """What `interlock edit` asks: replace `output` (a file name or a role) with `body`."""

    output: str
    body: str
    note: str = ""

    def to_message(self) -> str:
        """The command's message text."""
        return json.dumps({"output": self.output, "body": self.body, "note": self.note})


@dataclass(frozen=True, kw_only=True)
class RejectRequest:
    """What `interlock reject` asks: go back to phase `to`, with `feedback`."""

    to: str
    feedback: str = ""

    def to_message(self) -> str:
        """The command's message text."""
        return json.dumps({"to": self.to, "feedback": self.feedback})


def _payload(message: str, keys: tuple[str, ...]) -> dict[str, Any] | str:
    try:
        data = json.loads(message)
    except ValueError:
        return "the command's message is not JSON (posted by an older or foreign client?)"
    if not isinstance(data, dict) or any(not isinstance(data.get(k), str) for k in keys):
        return f"the command's message must be a JSON object with {', '.join(keys)}"
    return data


# -- reject -------------------------------------------------------------------------------------


def check_reject(pipeline: Pipeline, state: RunState, to: str) -> str | None:
    """Why the run cannot be sent back to phase `to` now (None: it can)."""
    run = state.run_id
    phases = [p.id for p in pipeline.phases]
    if to not in phases:
        return f"run {run}: pipeline {state.pipeline!r} has no phase {to!r}; phases are " + (
            ", ".join(phases)
        )
    if state.status is not RunStatus.PAUSED:
        return (
            f"run {run} is {state.status.value}, not paused: a run is rejected at a review "
            "(a pause_after or budget pause), where nothing is running"
        )
    if state.visits.get(to, 0) == 0:
        ran = ", ".join(p for p in phases if state.visits.get(p, 0)) or "none"
        return f"run {run}: phase {to!r} has not run yet; send it back to one that has ({ran})"
    # A failed attempt not yet given its retry counts as waiting for one: a report and this
    # command may be folded before the engine settles, and a retry scheduled after the
    # rejection would run a task of the visit left behind while the new one goes on. So does
    # an attempt waiting for its task slot: the slot it gets later would be held for good.
    pending = (
        state.failing
        or state.task_slot_waits
        or any(t.status.in_flight or t.status is TASK_RETRY_WAIT for t in state.tasks.values())
    )
    if pending:
        return (
            f"run {run} has tasks still running or waiting for a retry or a slot; approve it and "
            "reject at its next pause"
        )
    if state.rejections >= pipeline.max_rejections:
        return (
            f"run {run} was already rejected {state.rejections} time(s), the limit of pipeline "
            f"{state.pipeline!r} (max_rejections: {pipeline.max_rejections}); approve or "
            "cancel it, or raise max_rejections for new runs"
        )
    return None


def interpret_reject(
    pipeline: Pipeline, state: RunState, message: str, by: str, now: float
) -> ev.Rejected | str:
    """The `Rejected` a reject command leads to, or why it is refused."""
    data = _payload(message, ("to", "feedback"))
    if isinstance(data, str):
        return data
    problem = check_reject(pipeline, state, data["to"])
    if problem is not None:
        return problem
    return ev.Rejected(at=now, to=data["to"], feedback=data["feedback"], by=by)


@dataclass(frozen=True, kw_only=True)
class SentBack:
    """What the model of a task in a rejected visit is told besides its task."""

    feedback: str
    # The version sent back (a file name in the run folder), shown to the model among its
    # input files; None when the task reads its own output already, or has none yet.
    previous: str | None = None
    previous_sha256: str | None = None

    @property
    def shown_as(self) -> str:
        """The name the version sent back has among the task's input files."""
        return f"{self.previous} (the version sent back)"


def sent_back(pipeline: Pipeline, state: RunState, task: TaskState) -> SentBack | None:
    """What a task's model is told of a rejection besides its task text (None: nothing).

    A rejection's text reaches every model task of the visit it started, with the version it
    sent back, so that `interlock reject -m "shorter"` is never lost on a task that does not
    place `{{ feedback }}`, and the model revises that version rather than starting over. A
    task that places the feedback already says it in its own words (and chooses its reads);
    commands and calls are not told (they read `{{ feedback }}` in their arguments or
    `ctx.task`, and `reject` says which don't).
    """
    if not state.feedback or state.rejected_visit != (task.phase, task.visit):
        return None
    worker = pipeline.worker(task.role)
    if worker.kind != "model" or "feedback" in template_names(worker.task):
        return None
    # The visit before this one, looked up by id rather than as the role's latest output:
    # the answer must not change once this task completes (its fingerprint is taken again).
    done = state.tasks.get(task_id_for(task.role, task.visit - 1, task.item))
    reads_itself = worker.output_name in {read_name(entry)[0] for entry in worker.reads}
    if done is None or done.artifact is None or reads_itself:
        return SentBack(feedback=state.feedback)
    return SentBack(feedback=state.feedback, previous=done.artifact, previous_sha256=done.sha256)


def with_feedback(task_text: str, sent: SentBack | None) -> str:
    """A rendered task with what it is told of a rejection (see `sent_back`) after it."""
    if sent is None:
        return task_text
    version = "the previous version"
    if sent.previous is not None:
        version += f" ({sent.shown_as}, among the input files)"
    return (
        f"{task_text.rstrip()}\n\nA person reviewed {version} and sent it back with this "
        f"feedback; write a new version that addresses it:\n\n{sent.feedback.strip()}\n"
    )


def deaf_to_feedback(pipeline: Pipeline, phase: str) -> list[str]:
    """The workers of `phase` that a rejection's feedback does not reach (commands, calls and
    sub-pipelines whose task or arguments do not place `{{ feedback }}`)."""
    deaf = []
    for worker in pipeline.phase(phase).workers:
        if worker.kind == "model":
            continue
        texts = [worker.task, *(worker.command or []), *map(str, worker.inputs.values())]
        if not any("feedback" in template_names(text) for text in texts):
            deaf.append(worker.role)
    return deaf


def rejection_at(history: Iterable[ev.Event], phase: str, visit: int) -> ev.Rejected | None:
    """How a run's review after visit `visit` of `phase` ended, when it was a rejection.

    A rerun pauses at the reviews its source paused at; when the source was sent back there,
    doing the same (the same phase and feedback) reuses what the source then produced, at no
    cost, and a person should be told so rather than left to remember the feedback.
    """
    paused_at: tuple[str, int] | None = None
    for event in history:
        if isinstance(event, ev.Paused):
            paused_at = (event.phase, event.visit)
        elif isinstance(event, ev.Rejected) and paused_at == (phase, visit):
            return event
        elif isinstance(event, (ev.Approved, ev.Rejected)):
            paused_at = None
    return None


# -- edit ---------------------------------------------------------------------------------------


def latest_outputs(state: RunState) -> Iterator[TaskState]:
    """The completed tasks whose outputs later tasks read (each role's latest visit)."""
    for role, (visit, by_item) in state.outputs.items():
        for item in by_item:
            task = state.tasks.get(task_id_for(role, visit, item))
            if task is not None:
                yield task


def find_output(state: RunState, output: str) -> TaskState | str:
    """The task whose current output `output` names (a file name or a role), or why none."""
    run = state.run_id
    current = list(latest_outputs(state))
    for task in current:
        if task.artifact == output:
            return task
    by_role = [t for t in current if t.role == output]
    if len(by_role) == 1:
        return by_role[0]
    names = ", ".join(sorted(t.artifact for t in current if t.artifact)) or "none yet"
    if by_role:
        return f"run {run}: {output!r} has one output per item; name the file ({names})"
    if any(t.artifact == output for t in state.tasks.values()):
        return (
            f"run {run}: {output!r} is an earlier version that nothing reads any more; "
            f"edit the current one ({names})"
        )
    return f"run {run} has no output {output!r}; its outputs are {names}"


def check_edit(pipeline: Pipeline, state: RunState, request: EditRequest) -> TaskState | str:
    """The task whose output the request replaces, or why it cannot (nothing is changed)."""
    if state.status is not RunStatus.PAUSED:
        return (
            f"run {state.run_id} is {state.status.value}, not paused: outputs are edited at a "
            "review (a pause_after or budget pause)"
        )
    task = find_output(state, request.output)
    if isinstance(task, str):
        return task
    size = len(request.body.encode())
    if size > EDIT_LIMIT:
        return f"the new {task.artifact} has {size} bytes; an edit may have at most {EDIT_LIMIT}"
    if not request.body.strip():
        # As an empty model answer is never an output (`providers.verdict`).
        return (
            f"the new {task.artifact} is empty (or only whitespace): an empty output is never "
            "recorded, nothing was changed; give its text, or send the run back to have it "
            "written again (interlock reject)"
        )
    return task


def edited_values(pipeline: Pipeline, task: TaskState, body: str) -> dict[str, Any] | str:
    """The values the worker's `extract:` finds in the new text, or why it finds none."""
    try:
        return extract_values(pipeline.worker(task.role).extract, body)
    except ExtractionError as exc:
        return f"the new {task.artifact} fails its worker's extract: {exc}; nothing was changed"


def interpret_edit(
    pipeline: Pipeline, state: RunState, message: str, by: str, now: float
) -> tuple[ev.OutputEdited, bytes] | str:
    """The `OutputEdited` an edit command leads to with the new body, or why it is refused."""
    data = _payload(message, ("output", "body"))
    if isinstance(data, str):
        return data
    note = data.get("note") if isinstance(data.get("note"), str) else ""
    request = EditRequest(output=data["output"], body=data["body"], note=note or "")
    task = check_edit(pipeline, state, request)
    if isinstance(task, str):
        return task
    values = edited_values(pipeline, task, request.body)
    if isinstance(values, str):
        return values
    body = request.body.encode()
    event = ev.OutputEdited(
        at=now,
        task_id=task.task_id,
        artifact=task.artifact or "",
        old_sha256=task.sha256 or "",
        sha256=hashlib.sha256(body).hexdigest(),
        size=len(body),
        values=values,
        by=by,
        note=request.note,
    )
    return event, body


# -- what an edit makes run again ---------------------------------------------------------------


def _inputs(pipeline: Pipeline, state: RunState, task: TaskState) -> list[TaskState]:
    """The tasks whose current outputs `task` reads."""
    writers = pipeline.writers
    found = []
    for entry in pipeline.worker(task.role).reads:
        role = writers.get(read_name(entry)[0])
        latest = state.outputs.get(role) if role is not None else None
        if latest is None:
            continue
        visit, by_item = latest
        for item in by_item:
            source = state.tasks.get(task_id_for(role or "", visit, item))
            if source is not None:
                found.append(source)
    return found


def revisions(pipeline: Pipeline, state: RunState) -> tuple[list[tuple[TaskState, str]], bool]:
    """(tasks to run again now, each with the input that changed; whether any revision is
    still under way). A task is stale when an input it read was edited, or ran again because
    of an edit, after the task was dispatched; it runs again once none of its inputs is
    stale or running."""
    ready: list[tuple[TaskState, str]] = []
    pending = False
    stale_ids: set[str] = set()
    candidates = []
    for task in latest_outputs(state):
        if task.revising:
            pending = True
            continue
        if task.status is not TASK_COMPLETED:
            continue
        inputs = _inputs(pipeline, state, task)
        # Only a version the task read makes it stale: an input first dispatched after the
        # task last was (a later visit of its writer, when the task's own phase ran no task
        # since, as an empty fan-out does) was never read by it, however it changes.
        changed = [
            s
            for s in inputs
            if s.first_mark < task.dispatch_mark and s.revised_mark > task.dispatch_mark
        ]
        if changed:
            stale_ids.add(task.task_id)
            candidates.append((task, inputs, changed))
    for task, inputs, changed in candidates:
        pending = True
        blocked = any(
            s.task_id in stale_ids or s.revising or s.status is not TASK_COMPLETED for s in inputs
        )
        if not blocked:
            ready.append((task, changed[0].artifact or changed[0].task_id))
    return ready, pending
