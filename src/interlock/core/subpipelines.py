"""Sub-pipelines: a worker that runs another pipeline as a child run.

`pipeline: NAME` names a pipeline of the same file, `pipeline: other.yaml#NAME` one of a file
next to it. When a workflow file is loaded, each such worker gets the child's definition
copied into it (`pipeline_definition`), children of children too, so that a run pins every
pipeline it can start and the definition hash changes when a child does. A pipeline that
reaches itself through its children could never be written out: it is a validation error
naming the chain, and so is nesting deeper than `MAX_DEPTH`.

Pure: other files are read through the `Reader` the loader passes in.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from interlock.core.inputs import InputType, convert

if TYPE_CHECKING:  # types only: listing runs reads `CHILD_ID` without loading the models
    from interlock.core.workflow import Pipeline, Worker

# The shape of a child run's id (`child_run_id`): what lets the runs list mark and hide child
# runs by id alone. A person may name a run this way too; the first event settles it.
CHILD_ID = re.compile(r"-c[0-9a-f]{12}$")

MAX_DEPTH = 5  # a run and its children nested four deep: deeper is almost surely a mistake

Reader = Callable[[str, str], tuple[Any, str]]
"""(file as written, source of the file naming it) -> (that file's parsed data, its source);
raises ValueError with a message when the file cannot be read."""


def embed_children(data: dict[Any, Any], source: str, read: Reader) -> list[str]:
    """Copy each child's definition into the workers that name it (in place); the problems."""
    problems: dict[str, None] = {}
    for name, raw in data.items():
        _embed(raw, [(source, str(name))], data, source, read, problems)
    return list(problems)


def _workers(raw: Any) -> Iterator[dict[str, Any]]:
    phases = raw.get("phases") if isinstance(raw, dict) else None
    for phase in phases if isinstance(phases, list) else []:
        workers = phase.get("workers") if isinstance(phase, dict) else None
        for worker in workers if isinstance(workers, list) else []:
            if isinstance(worker, dict):
                yield worker


def _embed(
    raw: Any,
    chain: list[tuple[str, str]],
    file_data: Any,
    source: str,
    read: Reader,
    problems: dict[str, None],
) -> None:
    for worker in _workers(raw):
        ref = worker.get("pipeline")
        if not isinstance(ref, str):
            continue
        place = f"pipeline {chain[-1][1]!r}, worker {worker.get('role')!r}"
        file_part, _, name = ref.rpartition("#")
        target_data, target_source = file_data, source
        if file_part:
            try:
                target_data, target_source = read(file_part, source)
            except ValueError as exc:
                problems[f"{place}: pipeline {ref!r}: {exc}"] = None
                continue
        if not isinstance(target_data, dict) or name not in target_data:
            names_there = sorted(map(str, target_data)) if isinstance(target_data, dict) else []
            known = ", ".join(names_there)
            problems[
                f"{place}: pipeline {ref!r}: {target_source} has no pipeline named {name!r} "
                f"(pipelines there: {known or 'none'})"
            ] = None
            continue
        link = (target_source, name)
        names = " -> ".join([n for _, n in chain] + [name])
        if link in chain:
            problems[
                f"{place}: pipeline {name!r} calls itself without bound ({names}): a pipeline "
                "may not run itself as a child, directly or through others; loop back to a "
                "phase with 'next' and 'max_visits' instead"
            ] = None
            continue
        if len(chain) >= MAX_DEPTH:
            problems[
                f"{place}: children are nested more than {MAX_DEPTH} deep ({names}): run "
                "fewer levels of sub-pipelines"
            ] = None
            continue
        child = copy.deepcopy(target_data[name])
        _embed(child, [*chain, link], target_data, target_source, read, problems)
        worker["pipeline_definition"] = child


def child_run_id(parent_run: str, task_id: str, attempt: int) -> str:
    """The id of the child run that attempt `attempt` of `task_id` starts.

    Derived from the parent, the task and the attempt (never random), so that a parent that
    resumes after a crash finds the child it had started instead of starting a second one; a
    retry is a new attempt and so a new child. The parent's id is kept readable in front.
    """
    digest = hashlib.sha256(f"{parent_run}/{task_id}/{attempt}".encode()).hexdigest()[:12]
    return f"{parent_run[:60]}-c{digest}"


def children(pipeline: Pipeline) -> Iterator[tuple[Worker, Pipeline]]:
    """Each pipeline worker of `pipeline` with the child definition it runs."""
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.pipeline_definition is not None:
                yield worker, worker.pipeline_definition


def check_children(where: str, pipeline: Pipeline) -> list[str]:
    """Each pipeline worker's child is pinned, and its inputs are the child's inputs."""
    problems = []
    for phase in pipeline.phases:
        for worker in phase.workers:
            if worker.pipeline is None:
                continue
            place = f"{where}, phase {phase.id!r}, worker {worker.role!r}"
            child = worker.pipeline_definition
            if child is None:
                problems.append(
                    f"{place}: pipeline {worker.pipeline!r} was not loaded with the workflow "
                    "file: load the file with interlock.load_workflow"
                )
                continue
            declared = child.inputs
            for key in sorted(set(worker.inputs) - set(declared)):
                known = ", ".join(sorted(declared)) or "none"
                problems.append(
                    f"{place}: key 'inputs': pipeline {worker.child_name!r} has no input "
                    f"{key!r}; its inputs are {known}"
                )
            for key, spec in sorted(declared.items()):
                given = worker.inputs.get(key)
                if given is not None and not _fits(given, spec.kind):
                    problems.append(
                        f"{place}: key 'inputs': {key} = {given!r}, but pipeline "
                        f"{worker.child_name!r} takes {spec.kind} for input {key!r}"
                    )
                if spec.required and spec.default is None and key not in worker.inputs:
                    problems.append(
                        f"{place}: key 'inputs': pipeline {worker.child_name!r} needs input "
                        f"{key!r}: add '{key}: ...' under the worker's 'inputs'"
                    )
    return problems


def _fits(value: object, kind: InputType) -> bool:
    """Whether a child input's value is of its type; a template is known only at run time."""
    if isinstance(value, str) and "{{" in value:
        return True
    try:
        convert(value, kind)
    except (ValueError, TypeError, OverflowError):
        return False
    return True
