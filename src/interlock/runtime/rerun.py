"""Starting a rerun: a new run that may carry over its source run's outputs.

The source run is only read. The new run's `run_created` names it (and the `--from` phase);
everything else follows from the fingerprints (`runtime.reuse`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock.core.inputs import resolve_inputs
from interlock.core.loader import Definition, load_workflow
from interlock.core.state import RunState
from interlock.errors import RunInert, UsageError
from interlock.runtime.orchestrator import Orchestrator
from interlock.runtime.rerun_config import choose_config
from interlock.storage.base import RunRecord, Store, fold_history


class SourceNotEnded(UsageError):
    """The run to rerun is still running or paused (exit 2; 409 over HTTP)."""


@dataclass(frozen=True, kw_only=True)
class RerunRequest:
    """What a rerun changes, relative to its source run (None: keep the source's)."""

    source: str
    from_phase: str | None = None
    workflow: str | Path | None = None
    pipeline: str | None = None
    topic: str | None = None
    inputs: dict[str, Any] | None = None
    run_id: str | None = None
    no_cache: bool = False
    definition: Definition | None = None  # instead of `workflow`: a definition at hand
    # The source was imported from a bundle: run its pinned definition all the same.
    trust_bundle: bool = False


@dataclass(frozen=True, kw_only=True)
class PreparedRerun:
    """A checked rerun, ready to be created (or planned by --dry-run)."""

    source: str
    source_state: RunState
    definition: Definition
    topic: str
    inputs: dict[str, Any]
    from_phase: str | None
    no_cache: bool = False
    notes: tuple[str, ...] = ()  # what the person asking should know (a plan shows them)
    config_line: str | None = None  # `config: FILE`, the models' (None: the pipeline calls none)
    missing: tuple[str, ...] = ()  # code files it would run that are not there (also in notes)


def edited_since(record: RunRecord) -> str | None:
    """A note when the workflow file a run was started from has changed since (its pipeline
    no longer hashes the same): a rerun without --workflow runs the pinned definition, so
    an edit made for this rerun would be left out. None when unchanged or unreadable."""
    source = record.source
    if not source or source.startswith("<") or not Path(source).is_file():
        return None
    try:
        loaded = load_workflow(source).definitions.get(record.pipeline)
    except Exception:  # no longer loads: the rerun does not need it (it says so if asked)
        return None
    if loaded is None or loaded.hash == record.definition_hash:
        return None
    return (
        f"{source} has changed since {record.run_id} started: this rerun uses the definition "
        f"that run started with. To rerun with the edits: interlock rerun {record.run_id} "
        f"--workflow {source}"
    )


def prepare(store: Store, orchestrator: Orchestrator, request: RerunRequest) -> PreparedRerun:
    """Check a rerun request against its source; raises UsageError naming the fix."""
    source = request.source
    record = store.get_run(source)
    notes: tuple[str, ...] = ()
    state = fold_history(store.events(source))
    if not state.status.ended and state.imported:
        from interlock.runtime.orchestrator import imported_next

        step = imported_next(source, state.status.value, trusted=not state.inert)
        raise SourceNotEnded(
            f"run {source} is still {state.status.value}: a rerun needs a finished run. It "
            f"was imported from a bundle: {step[0].lower()}{step[1:]}; or stop it with "
            f"'interlock cancel {source}' and rerun it then"
        )
    if not state.status.ended:
        raise SourceNotEnded(
            f"run {source} is still {state.status.value}: a rerun needs a finished run. "
            f"Wait for it to end, or stop it with 'interlock cancel {source}' and rerun it "
            "then (its completed tasks are still reused)"
        )
    if request.definition is not None:
        definition = request.definition
    elif request.workflow is not None:
        loaded = load_workflow(request.workflow)
        name = request.pipeline or record.pipeline
        if request.pipeline is None and name not in loaded.definitions:
            # Never another pipeline than the source's unasked, even the file's only one: it
            # would be paid for as a "rerun" that shares nothing with its source.
            names = ", ".join(sorted(loaded.definitions))
            raise UsageError(
                f"{loaded.source}: has no pipeline {name!r}, the one run {source} ran "
                f"(its pipelines: {names}); nothing was recorded. Give the file that defines "
                f"{name!r}, or --pipeline NAME to run another pipeline on purpose"
            )
        definition = loaded.get(name)
    else:
        if state.inert and not request.trust_bundle:
            raise RunInert(
                f"run {source} was imported from a bundle: rerunning it as recorded runs the "
                "bundle's definition, which is code ('interlock verify FILE' lists the commands "
                f"and call: targets it runs). Rerun it with your own workflow: interlock rerun "
                f"{source} --workflow FILE; or, trusting the bundle: interlock rerun {source} "
                "--trust-bundle"
            )
        pinned = orchestrator.definition(record.pipeline, record.definition_hash)
        definition = dataclasses.replace(pinned, source=record.source)
        edited = edited_since(record)
        notes = (edited,) if edited else ()
    orchestrator.refuse_broken_config(definition)  # a plan refuses it too, as the rerun would
    phases = [p.id for p in definition.pipeline.phases]
    if request.from_phase is not None and request.from_phase not in phases:
        raise UsageError(
            f"--from {request.from_phase!r}: pipeline {definition.name!r} has no such phase; "
            f"its phases are {', '.join(phases)}"
        )
    declared = definition.pipeline.inputs
    kept = {k: v for k, v in state.inputs.items() if k in declared}
    dropped = sorted(k for k in state.inputs if k not in declared)
    if dropped:
        one = len(dropped) == 1
        notes += (
            f"pipeline {definition.name!r} does not declare {'input' if one else 'inputs'} "
            f"{', '.join(dropped)} of run {source}: the rerun runs without "
            f"{'it' if one else 'them'}",
        )
    # Checked here too, so that --dry-run refuses what the rerun itself would.
    inputs = resolve_inputs(definition.name, declared, {**kept, **(request.inputs or {})})
    config = choose_config(store, orchestrator.models, source, definition)
    missing = missing_code_notes(definition)
    notes += config.notes + missing
    return PreparedRerun(
        source=source,
        source_state=state,
        definition=definition,
        topic=state.topic if request.topic is None else request.topic,
        inputs=inputs,
        from_phase=request.from_phase,
        no_cache=request.no_cache,
        notes=notes,
        config_line=config.line,
        missing=missing,
    )


def missing_code_notes(definition: Definition) -> tuple[str, ...]:
    """A note per code file a command worker of the rerun would run that is not there (the
    same check the reuse verdicts make, `reuse.missing_code`): its task would fail."""
    from interlock.runtime.new_runs import driver_dir
    from interlock.runtime.reuse import missing_code

    folder = driver_dir(definition.source)
    notes = []
    for phase in definition.pipeline.phases:
        for worker in phase.workers:
            for path in missing_code(worker, folder):
                notes.append(
                    f"worker {worker.role!r} runs {path}, which is not there: its task would "
                    f"fail (copy the file there, or fix the path in {definition.source})"
                )
    return tuple(notes)


def create(orchestrator: Orchestrator, prepared: PreparedRerun, run_id: str | None) -> str:
    """Record the rerun (holding its lease); `drive` carries it out.

    Raises:
        UsageError: a script a command runs is not there (the plan lists the same): its
            task would fail after the tasks before it were paid for.
    """
    from interlock.runtime.run_config import config_origin

    if prepared.missing:
        listed = "\n".join(f"  - {problem}" for problem in prepared.missing)
        raise UsageError(
            f"{prepared.definition.source or prepared.definition.name}: nothing was "
            f"recorded:\n{listed}"
        )

    origin = {
        "rerun_of": prepared.source,
        "rerun_from": prepared.from_phase,
        "no_cache": prepared.no_cache,
        **config_origin(orchestrator.models, prepared.definition),
    }
    specs: list[tuple[Definition, str, dict[str, Any] | None, str | None]] = [
        (prepared.definition, prepared.topic, prepared.inputs, run_id)
    ]
    return orchestrator.create_runs(specs, origin=origin)[0]
