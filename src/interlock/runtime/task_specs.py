"""What a task's worker is handed (`TaskSpec`), and what a `pipeline` task's child run is
started with: its templates rendered from the run's state, its reads found in the run's folder.

Functions of the pipeline, the run's state and its folder alone: the run's record in the loop
(`RunDriver`) is never handed over.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.decide import budget_values, failed_item_values
from interlock.core.review import sent_back, with_feedback
from interlock.core.state import RunState, TaskState
from interlock.core.task_size import MAX_TASK_SIZE
from interlock.core.template_guard import RenderLimits
from interlock.core.templates import TemplateProblem, render_system, render_task, template_item
from interlock.core.validate import read_name
from interlock.core.waits import signal_values
from interlock.runtime.executors import Outcome, TaskSpec, escape_braces

if TYPE_CHECKING:
    from interlock.core.workflow import Pipeline, Worker


def prepare_spec(
    pipeline: Pipeline,
    state: RunState,
    task: TaskState,
    tmp: Path,
    *,
    run_dir: Path,
    workflow_dir: Path | None,
) -> Callable[[], TaskSpec | Outcome]:
    """What the worker of `task` receives, or why it cannot run, in two halves: what it
    reads of the run is read now, and the function returned renders the templates from that
    copy alone, so that it may run in a thread while the loop goes on changing the run's
    state."""
    worker = pipeline.worker(task.role)
    items = state.current.items if state.current else None
    item = items[task.item] if items is not None and task.item is not None else None
    text = worker.task
    templated = renders_templates(worker)
    sent = sent_back(pipeline, state, task)
    reads = _reads(pipeline, state, task, run_dir)
    if isinstance(reads, Outcome):
        return functools.partial(_same, reads)
    if sent is not None and sent.previous is not None:
        reads.append((sent.shown_as, run_dir / sent.previous))
    run_id = state.run_id
    key = hashlib.sha256(f"{run_id}/{task.task_id}/{task.attempt}".encode()).hexdigest()
    # A `call:` worker's model calls are held to what the budget has left (none once a
    # person let the run go past it).
    held = worker.call is not None and not state.budget_waived
    left = budget_values(state, pipeline) if held else {}
    spec = TaskSpec(
        run_id=run_id,
        task_id=task.task_id,
        attempt=task.attempt,
        worker=worker,
        task=text if templated else with_feedback(text, sent),
        topic=state.topic,
        inputs=state.inputs,
        item=item,
        reads=reads,
        output=tmp,
        run_dir=run_dir,
        model=task.model,
        workflow_dir=workflow_dir,
        idempotency_key=key[:32],
        pipeline=state.pipeline,
        budget_usd_left=left.get("remaining_usd"),
        budget_tokens_left=left.get("remaining_tokens"),
        tool_decisions=task.tool_decisions,
    )
    if not templated:  # nothing to render: the spec is final now
        return functools.partial(_same, spec)
    values = template_values(pipeline, state, task, item)
    inputs = dict(state.inputs)
    # The command gets the pipeline's `env` names as well as its own.
    env = pipeline.env_for(worker.role) if worker.command is not None else []

    def render() -> TaskSpec | Outcome:
        try:
            rendered, argv = _render_spec(worker, values, inputs)
        except TemplateProblem as exc:
            return Outcome(ok=False, error=str(exc), retryable=False)
        ran = worker if argv is None else worker.model_copy(update={"command": argv, "env": env})
        if worker.system is not None and "{" in worker.system:
            try:
                system = render_system(worker.system, values, render_limits(worker))
            except TemplateProblem as exc:
                return Outcome(ok=False, error=str(exc), retryable=False)
            ran = ran.model_copy(update={"system": system})
        return dataclasses.replace(spec, task=with_feedback(rendered, sent), worker=ran)

    return render


def template_values(
    pipeline: Pipeline, state: RunState, task: TaskState, item: Any
) -> dict[str, Any]:
    """What a task's templates may use."""
    return {
        **state.inputs,
        "topic": state.topic,
        "inputs": state.inputs,
        "item": template_item(item),
        "item_index": task.item,
        "visit": task.visit,
        "run_id": state.run_id,
        "feedback": state.feedback,
        "signals": signal_values(pipeline, state),
        "failed_items": failed_item_values(state, pipeline),
    }


def child_request(
    pipeline: Pipeline, state: RunState, task: TaskState
) -> tuple[str, dict[str, Any]] | str:
    """The topic and inputs of the child run a `pipeline` task starts (its `task` and
    `inputs` rendered), or why they cannot be rendered."""
    worker = pipeline.worker(task.role)
    items = state.current.items if state.current else None
    item = items[task.item] if items is not None and task.item is not None else None
    values = template_values(pipeline, state, task, item)
    try:
        limits = render_limits(worker)
        topic = render_task(worker.task, values, limits) if worker.task else state.topic
        inputs = {
            key: render_task(value, values, limits) if isinstance(value, str) else value
            for key, value in worker.inputs.items()
        }
    except TemplateProblem as exc:
        return str(exc)
    return topic, inputs


def _reads(
    pipeline: Pipeline, state: RunState, task: TaskState, run_dir: Path
) -> list[tuple[str, Path]] | Outcome:
    """The files a task reads (name, path), or why a required one has none."""
    worker = pipeline.worker(task.role)
    writers = pipeline.writers
    reads = []
    for entry in worker.reads:
        name, optional = read_name(entry)
        role = writers[name]
        visit_outputs = state.outputs.get(role)
        files: list[str] = []
        if visit_outputs is not None:
            by_item = visit_outputs[1]
            same_lane = pipeline.phase_of(role).id == task.phase and task.item is not None
            if same_lane:
                files = [by_item[task.item]] if task.item in by_item else []
            else:
                files = [by_item[k] for k in sorted(by_item, key=lambda k: -1 if k is None else k)]
        if not files and not optional:
            error = _unwritten(pipeline, state, name, role)
            return Outcome(ok=False, error=error, retryable=False)
        reads += [(name, run_dir / f) for f in files]
    return reads


def _unwritten(pipeline: Pipeline, state: RunState, name: str, role: str) -> str:
    """Why a required input has no file, and the fix."""
    phase = pipeline.phase_of(role)
    optional = f"mark the read optional ('{name}?') to go on without it"
    if not state.visits.get(phase.id):
        return f"input {name!r} has not been written: phase {phase.id!r} has not run; {optional}"
    failed = state.failed_items.get(phase.id, (0, {}))[1]
    if phase.for_each is not None and failed:  # its latest visit's every item failed
        return (
            f"input {name!r} has not been written: every item of phase {phase.id!r} failed "
            f"({len(failed)} of {len(failed)} items), within its tolerate "
            f"{phase.for_each.tolerate}, so {role!r} wrote none; {optional}"
        )
    if phase.for_each is not None:
        return (
            f"input {name!r} has not been written: phase {phase.id!r} fans out over "
            f"{phase.for_each.items}, which held no items, so {role!r} ran for none; {optional}"
        )
    return f"input {name!r} has not been written"


def _same(made: TaskSpec | Outcome) -> TaskSpec | Outcome:
    return made


def renders_templates(worker: Worker) -> bool:
    """Whether a worker's task, system prompt or command has templates to render (most
    tasks are plain text, rendered by nothing)."""
    return "{" in worker.task or "{" in (worker.system or "") or worker.command is not None


def render_limits(worker: Worker) -> RenderLimits:
    """The bounds of rendering a worker's templates: its `max_task_size`, and wall-clock time
    besides the steps counted."""
    size = worker.max_task_size or MAX_TASK_SIZE
    return RenderLimits(size=size, clock=time.monotonic)


def _render_spec(
    worker: Worker, values: dict[str, Any], inputs: dict[str, Any]
) -> tuple[str, list[str] | None]:
    """A worker's task text and command rendered (raises TemplateProblem)."""
    limits = render_limits(worker)
    text = render_task(worker.task, values, limits)
    if worker.command is None:
        return text, None
    # Values rendered into an argument keep their braces literal, so that a topic or an
    # extracted item can never turn into a placeholder such as {output}.
    literal = {k: escape_braces(v) if isinstance(v, str) else v for k, v in values.items()}
    literal["inputs"] = {
        k: escape_braces(v) if isinstance(v, str) else v for k, v in inputs.items()
    }
    return text, [render_task(arg, literal, limits) for arg in worker.command]
