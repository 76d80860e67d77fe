"""Carrying earlier outputs over: the runtime side of reruns (and of the cache).

The orchestrator gives each run a `Reuser`. It stamps every completion with the task's
fingerprint, and before a dispatched task is started it looks for an output to carry over:
the source run's task with the same id (for a rerun) or, when caching is on, any earlier task
of the store with the same fingerprint. The verdict is `core.reuse.judge`'s; the body is
taken from the ledger or the source run's folder and checked against its recorded hash. A
reuse is recorded (`task_reused`) before its file is placed, and a crash in between is
repaired from the same places on resume (`recover`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.core import events as ev
from interlock.core.fingerprint import Fingerprint, fingerprint
from interlock.core.loader import Definition
from interlock.core.reuse import ReuseVerdict, judge
from interlock.core.state import RunState, TaskState, fold
from interlock.core.workflow import Worker
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.storage.base import Store

log = logging.getLogger("interlock.runtime")


def model_identity(models: ModelRunner, worker: Worker, workflow_dir: Path | None) -> Any:
    """What a model worker's aliases stand for here: provider, model id, request settings.

    An alias that does not resolve is named as such: the task fails when it runs, and a
    fingerprint must not pretend to know the model behind it.
    """
    if worker.model is None:
        return None
    identity = []
    for alias in (worker.model, *worker.fallback_models):
        try:
            model = models.resolve(alias, workflow_dir).model
        except Exception:  # a configuration problem: reported when the task runs
            identity.append({"alias": alias, "unresolved": True})
            continue
        identity.append(
            {
                "alias": alias,
                "provider": model.provider,
                "kind": str(model.kind),
                "model": model.model,
                "max_output_tokens": model.max_output_tokens,
            }
        )
    return identity


@dataclass
class SourceRun:
    """A finished run whose outputs a rerun may carry over (read once, never written)."""

    run_id: str
    state: RunState
    parts: dict[str, dict[str, str]]  # task id -> the per-part hashes recorded with it
    run_dir: Path
    branches: dict[tuple[str, int], str] = field(default_factory=dict)  # (phase, visit) -> goto

    @classmethod
    def load(cls, store: Store, home: Home, run_id: str) -> SourceRun:
        """Fold the source run's history."""
        stored = store.events(run_id)
        parts: dict[str, dict[str, str]] = {}
        branches: dict[tuple[str, int], str] = {}
        events = [s.event for s in stored]
        for event in events:
            if isinstance(event, (ev.TaskCompleted, ev.TaskReused)) and event.fingerprint_parts:
                parts[event.task_id] = dict(event.fingerprint_parts)
            elif isinstance(event, ev.BranchTaken):
                branches[(event.phase, event.visit)] = event.goto
        return cls(
            run_id=run_id,
            state=fold(events),
            parts=parts,
            run_dir=home.run_dir(run_id),
            branches=branches,
        )


@dataclass
class Claim:
    """A reuse to record, with the verified body of the output it carries over."""

    event: ev.TaskReused
    body: bytes


@dataclass
class Reuser:
    """Fingerprints and reuse for one run."""

    store: Store
    home: Home
    models: ModelRunner
    definition: Definition
    workflow_dir: Path | None
    source: SourceRun | None = None
    notes: list[str] = field(default_factory=list)  # why a match could not be used
    verdicts: dict[str, ReuseVerdict] = field(default_factory=dict)
    _identities: dict[str, Any] = field(default_factory=dict)

    def identity(self, role: str) -> Any:
        """The worker's resolved identity (once per role and process)."""
        if role not in self._identities:
            worker = self.definition.pipeline.worker(role)
            self._identities[role] = model_identity(self.models, worker, self.workflow_dir)
        return self._identities[role]

    def fingerprint(self, state: RunState, task: TaskState) -> Fingerprint:
        """The task's fingerprint in the run's current state."""
        pipeline = self.definition.pipeline
        return fingerprint(pipeline, state, task, self.identity(task.role))

    def stamp(self, state: RunState, event: ev.TaskCompleted) -> ev.TaskCompleted:
        """The completion with the fingerprint of its task (before it is applied)."""
        task = state.tasks.get(event.task_id)
        if task is None or event.fingerprint is not None:
            return event
        print_ = self.fingerprint(state, task)
        return dataclasses.replace(
            event, fingerprint=print_.digest, fingerprint_parts=dict(print_.parts)
        )

    def claim(self, state: RunState, task: TaskState, now: float) -> Claim | None:
        """The reuse of `task`'s output, if a matching one can be carried over."""
        source = self.source
        if source is None or task.attempt != 1:
            return None
        current = self.fingerprint(state, task)
        candidate = source.state.tasks.get(task.task_id)
        verdict = judge(
            state,
            task,
            current,
            candidate,
            source_run=source.run_id,
            candidate_parts=source.parts.get(task.task_id),
        )
        self.verdicts[task.task_id] = verdict
        if not verdict.reuse or candidate is None:
            return None
        assert candidate.sha256 is not None and candidate.artifact is not None
        body = self.body(source.run_dir, candidate)
        if body is None:
            self.notes.append(
                f"task {task.task_id} could not reuse the output of {source.run_id}: "
                f"{candidate.artifact} is gone or does not match its recorded hash; it runs"
            )
            return None
        event = ev.TaskReused(
            at=now,
            task_id=task.task_id,
            attempt=task.attempt,
            source_run=source.run_id,
            source_task=candidate.task_id,
            artifact=candidate.artifact,
            sha256=candidate.sha256,
            size=len(body),
            values=dict(candidate.values),
            fingerprint=current.digest,
            fingerprint_parts=dict(current.parts),
        )
        return Claim(event=event, body=body)

    def body(self, run_dir: Path, task: TaskState) -> bytes | None:
        """A recorded output's body, from the ledger or the run's folder, checked by hash."""
        if task.sha256 is None:
            return None
        body = self.store.artifact(task.sha256)
        if body is None and task.artifact is not None:
            try:
                body = (run_dir / task.artifact).read_bytes()
            except OSError:
                return None
        if body is None or hashlib.sha256(body).hexdigest() != task.sha256:
            return None
        return body

    def recover(self, task: TaskState) -> bytes | None:
        """The body of a reused output whose file a crash kept from being placed."""
        if task.reused_from is None:
            return None
        run_id = task.reused_from.partition("/")[0]
        return self.body(self.home.run_dir(run_id), task)
