"""One pure step of a run: observations in, events and effects out.

`RunMachine.step(state, inputs, now)` checks each observation against the run's state, turns
those that count into events, settles the decision table (`core.decide`), and says what the
runtime must then do (`effects`). It does no I/O, reads no clock (`now` is given) and starts
no thread: the same state, inputs and time give the same step, which is what lets the
simulator and the engine-level tests drive a run exactly as the orchestrator does.

The step folds its events into `state` as it makes them (the state is the fold of the ledger,
and every later decision of the step depends on the earlier ones): a caller whose commit of
the events fails rebuilds the state from the ledger, as it would after a crash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from interlock.core import events as ev
from interlock.core.decide import Evaluator, given_up, settle
from interlock.core.expressions import evaluate
from interlock.core.observe import (
    Command,
    CommandKind,
    accept_batch_wait,
    accept_child_spend,
    accept_child_update,
    accept_result,
    implied_start,
    interpret_command,
    late_usage,
)
from interlock.core.review import interpret_edit, interpret_reject
from interlock.core.state import RunState, TaskState, apply, artifact_name
from interlock.core.workflow import Pipeline
from interlock.engine import effects as fx
from interlock.engine import inputs as obs

E = TypeVar("E", bound=fx.Effect)

Stamp = Callable[[RunState, ev.TaskCompleted], ev.TaskCompleted]
"""Adds what a completion's output depends on (its fingerprint) before it is applied."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event to append, the rule that decided it (None for observations; a `RuleName`
    for the engine's decisions), and why."""

    event: ev.Event
    rule: str | None = None
    why: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """What one step made: events to append (in this order), the bodies to store with them
    in the ledger (SHA-256, bytes), the effects to carry out once they are recorded, and
    why commands were refused (for the person who sent them)."""

    events: tuple[Recorded, ...] = ()
    stored: tuple[tuple[str, bytes], ...] = ()
    effects: tuple[fx.Effect, ...] = ()
    refused: tuple[str, ...] = ()

    def of(self, kind: type[E]) -> list[E]:
        """The effects of one kind, in order."""
        return [e for e in self.effects if isinstance(e, kind)]


class RunMachine:
    """The step function of the runs of one pipeline.

    Args:
        pipeline: the run's pinned pipeline.
        stamp: adds a completion's fingerprint before it is applied (reruns and the cache
            need it); None records completions as reported.
        evaluator: how conditions are evaluated (`check` explores every outcome).
        reserve: role -> the most one call of that model worker can cost (USD), held
            against a cost budget before the call starts (`core.decide`); None or a role
            left out: a call starts whenever anything of the budget is left.
    """

    __slots__ = ("evaluator", "pipeline", "reserve", "stamp")

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        stamp: Stamp | None = None,
        evaluator: Evaluator = evaluate,
        reserve: Mapping[str, float] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.stamp = stamp
        self.evaluator = evaluator
        self.reserve = reserve

    def step(
        self,
        state: RunState,
        inputs: Iterable[obs.Input],
        now: float,
        *,
        handles: obs.Handles | None = None,
        archive: bool = True,
        act: bool = True,
    ) -> Step:
        """Observe `inputs` in order, settle, and say what to do.

        Args:
            state: the run's folded state; the step's events are folded into it.
            inputs: observations, in the order they arrived (the order is kept: a start
                before its completion, a command after the results it may depend on).
            now: the time of the step.
            handles: what the runtime runs for the run (None: nothing; effects then ask to
                start every attempt in flight).
            archive: whether a delivered run may be archived now (its files are durable).
            act: False leaves out every effect but the writes: a caller that carries out
                the rest once the events are recorded asks for them then (`effects`).
        """
        made = _Making()
        for item in inputs:
            self._observe(state, item, now, made)
        self._settle(state, now, archive, made)
        effects: list[fx.Effect] = [*made.writes]
        if act:
            effects += self.effects(state, handles or _NONE, made.writes)
        return Step(
            events=tuple(made.events),
            stored=tuple(made.stored),
            effects=tuple(effects),
            refused=tuple(made.refused),
        )

    def settle(self, state: RunState, now: float, *, archive: bool = True) -> list[Recorded]:
        """Only the decisions: apply the table until it says wait (no observation, no
        effects); what a caller that granted slots mid-turn records next."""
        made = _Making()
        self._settle(state, now, archive, made)
        return made.events

    def accepts(self, state: RunState, result: obs.TaskResult) -> bool:
        """Whether a worker's report would be recorded now: the runtime asks before it
        renames a finished output into place (a stale attempt's file is discarded)."""
        return accept_result(state, result)

    # -- observing ---------------------------------------------------------------------------

    def _observe(self, state: RunState, item: obs.Input, now: float, made: _Making) -> None:
        if isinstance(item, obs.Reported):
            self._reported(state, item, made)
        elif isinstance(item, obs.Reused):
            self._reused(state, item, made)
        elif isinstance(item, obs.ChildChanged):
            if accept_child_update(state, item.event):
                made.add(state, item.event, why=item.event.detail or None)
        elif isinstance(item, obs.ChildSpend):
            if accept_child_spend(state, item.event):
                made.add(state, item.event, why="the child run spent more")
        elif isinstance(item, obs.BatchWait):
            if accept_batch_wait(state, item.event):
                why = "its model call waits in a provider batch: no timeout runs meanwhile"
                made.add(state, item.event, why=why if item.event.waiting else None)
        elif isinstance(item, obs.Begun):
            task = state.tasks.get(item.task_id)
            fresh = task is not None and task.attempt == item.attempt and task.status.in_flight
            if fresh and task is not None and task.started_at is None:
                start = ev.TaskStarted(at=now, task_id=item.task_id, attempt=item.attempt)
                why = "begun by a worker of an orchestrator that stopped before recording it"
                made.add(state, start, why=why)
        elif isinstance(item, obs.Adopted):
            self._adopted(state, item, now, made)
        elif isinstance(item, obs.Noted):
            made.add(state, ev.Warned(at=now, message=item.message))
        elif isinstance(item, obs.PersonCommand):
            self._command(state, item, now, made)
        elif isinstance(item, obs.Granted):
            # Folded by the slot keeper as the store granted them: recorded here, in place.
            made.events += [Recorded(e, rule, why) for e, rule, why in item.events]

    def _reported(self, state: RunState, item: obs.Reported, made: _Making) -> None:
        event = item.event
        if not accept_result(state, event):
            late = late_usage(state, event)  # a stale result: what its call cost is kept
            if late is not None:
                made.add(state, late, why="answered after it stopped counting")
            return
        if isinstance(event, ev.TaskCompleted):
            if item.body is not None and not item.on_disk:
                event = self._in_memory(state, event, item.body, made)
            elif item.body is not None:
                made.stored.append((event.sha256, item.body))
            if self.stamp is not None:
                event = self.stamp(state, event)
        start = implied_start(state, event)
        if start is not None:
            made.add(state, start, why="implied by the attempt's result")
        why = restarted(state, event)
        made.add(state, event, why=why)

    def _in_memory(
        self, state: RunState, event: ev.TaskCompleted, body: bytes, made: _Making
    ) -> ev.TaskCompleted:
        """A completion whose output is in memory: stored with it, written after it."""
        artifact = self._artifact(state.tasks[event.task_id])
        sha = hashlib.sha256(body).hexdigest()
        made.stored.append((sha, body))
        made.writes.append(fx.WriteOutput(artifact=artifact, body=body, sha256=sha))
        return ev.TaskCompleted(
            at=event.at,
            task_id=event.task_id,
            attempt=event.attempt,
            artifact=artifact,
            sha256=sha,
            size=len(body),
            values=event.values,
            usage=event.usage,
            records=event.records,
        )

    def _reused(self, state: RunState, item: obs.Reused, made: _Making) -> None:
        event = item.event
        task = state.tasks.get(event.task_id)
        if task is None or task.attempt != event.attempt or not task.status.in_flight:
            return  # claimed twice, or the run moved on (cancelled): nothing to record
        if item.stored:
            made.stored.append((event.sha256, item.body))
        made.writes.append(
            fx.WriteOutput(
                artifact=self._artifact(task), body=item.body, sha256=event.sha256, reused=True
            )
        )
        why = f"same fingerprint as {event.source_task} of {event.source_run}"
        made.add(state, event, why=why)

    def _adopted(self, state: RunState, item: obs.Adopted, now: float, made: _Making) -> None:
        event = item.event
        task = state.tasks.get(event.task_id)
        if task is None or task.attempt != event.attempt or not task.status.in_flight:
            return
        if event.sha256 == task.sha256:
            return  # the output it had before an edit's re-run: not a new result
        if item.body is not None:
            made.stored.append((event.sha256, item.body))
        if self.stamp is not None:
            event = self.stamp(state, event)
        if task.started_at is None:  # it ran: its worker began it, unrecorded
            start = ev.TaskStarted(at=now, task_id=task.task_id, attempt=task.attempt)
            made.add(state, start, why="implied by its output found on disk")
        made.add(state, event, why="output found committed on disk")

    def _command(self, state: RunState, item: obs.PersonCommand, now: float, made: _Making) -> None:
        kind = CommandKind(item.kind)
        if kind is CommandKind.REJECT:
            rejected = interpret_reject(self.pipeline, state, item.message, item.by, now)
            if isinstance(rejected, str):
                made.refused.append(rejected)
                return
            made.add(state, rejected, why=f"reject from {item.by}")
            return
        if kind is CommandKind.EDIT:
            edited = interpret_edit(self.pipeline, state, item.message, item.by, now)
            if isinstance(edited, str):
                made.refused.append(edited)
                return
            event, body = edited
            made.stored.append((event.sha256, body))  # stored with the event
            made.writes.append(
                fx.WriteOutput(artifact=event.artifact, body=body, sha256=event.sha256)
            )
            why = f"edit from {item.by}" + (f": {event.note}" if event.note else "")
            made.add(state, event, why=why)
            return
        outcome = interpret_command(
            state, Command(kind=kind, message=item.message, by=item.by), now
        )
        if isinstance(outcome, str):
            made.refused.append(outcome)
            return
        made.add(state, outcome, why=f"{item.kind} from {item.by}")

    def _settle(self, state: RunState, now: float, archive: bool, made: _Making) -> None:
        # `settle` folds each decision into the state as it goes.
        decisions = settle(
            self.pipeline,
            state,
            now,
            evaluator=self.evaluator,
            archive=archive,
            reserve=self.reserve,
        )
        for d in decisions:
            made.events.append(Recorded(d.event, d.rule, d.why))

    # -- acting --------------------------------------------------------------------------------

    def effects(
        self,
        state: RunState,
        handles: obs.Handles,
        writes: Sequence[fx.WriteOutput] = (),
    ) -> list[fx.Effect]:
        """What the state calls for besides the writes, given what runs now; safe to ask
        again (it looks at the state, not at what changed)."""
        out: list[fx.Effect] = []
        if state.delivered is not None and not handles.final_placed:
            out.append(_final(state, state.delivered, writes))
        pipeline = self.pipeline
        if state.status.ended:
            if not handles.children_stopped:
                out.append(fx.StopChildren())
            # In the order the workers were started (the runtime's mapping keeps it).
            running = tuple(t for t in handles.running if t not in handles.stopping)
            if running:
                out.append(fx.StopWorkers(task_ids=running))
        elif state.inert:
            pass  # imported and not trusted (`RunImported`): nothing of it is started
        elif given_up(pipeline, state) is None:
            # (A run that fails once its running attempts end starts nothing more.)
            for task in self._to_start(state, handles):
                running_attempt = handles.running.get(task.task_id)
                if running_attempt is not None and running_attempt != task.attempt:
                    out.append(fx.CancelAttempt(task_id=task.task_id, attempt=running_attempt))
                    running_attempt = None
                if running_attempt is not None or task.task_id in handles.claiming:
                    continue
                child = pipeline.worker(task.role).pipeline is not None
                out.append(
                    fx.StartAttempt(
                        task_id=task.task_id,
                        attempt=task.attempt,
                        child=child,
                        may_reuse=not child,  # a child run is never carried over
                    )
                )
        else:
            out.append(fx.Withdraw())
        if state.archived:  # first: its last status.json is then written into the archive
            out.append(fx.Archive())
        out.append(fx.RefreshStatus())
        return out

    def _to_start(self, state: RunState, handles: obs.Handles) -> list[TaskState]:
        """The tasks in flight that may have to be started: those dispatched since the
        effects were last carried out (all of them the first time), oldest first. Every
        other task in flight has its worker, or a claim of an earlier output, since then;
        should one not, all are looked at again."""
        if handles.since == 0:
            return state.in_flight()
        flight = state.flight
        fresh = []
        for task_id in reversed(flight):  # in dispatch order: the newest dispatch last
            task = state.tasks[task_id]
            if task.dispatch_mark <= handles.since:
                break
            fresh.append(task)
        if len(flight) - len(fresh) > len(handles.running) + len(handles.claiming):
            return state.in_flight()
        fresh.reverse()
        return fresh

    def _artifact(self, task: TaskState) -> str:
        """The file name a task's output is committed under."""
        output = self.pipeline.worker(task.role).output_name
        return artifact_name(output, task.visit, task.item)


class _Making:
    """What a step has made so far."""

    __slots__ = ("events", "refused", "stored", "writes")

    def __init__(self) -> None:
        self.events: list[Recorded] = []
        self.stored: list[tuple[str, bytes]] = []
        self.writes: list[fx.WriteOutput] = []
        self.refused: list[str] = []

    def add(self, state: RunState, event: ev.Event, *, why: str | None = None) -> None:
        apply(state, event)
        self.events.append(Recorded(event, None, why))


_NONE = obs.Handles()


def _final(state: RunState, delivered: str, writes: Sequence[fx.WriteOutput]) -> fx.PlaceFinal:
    """final.md for the delivered output, with its body when this step wrote it. The
    recorded hash picks the body: an output edited at a review after its worker completed
    has a newer text than the one kept at completion."""
    recorded = next((t.sha256 for t in state.tasks.values() if t.artifact == delivered), None)
    body = next(
        (
            w.body
            for w in reversed(writes)
            if w.artifact == delivered and recorded in (None, w.sha256)
        ),
        None,
    )
    return fx.PlaceFinal(artifact=delivered, sha256=recorded, body=body)


def restarted(state: RunState, event: ev.Event) -> str | None:
    """Why a start is recorded for an attempt that had started already, else None."""
    if not isinstance(event, ev.TaskStarted):
        return None
    task = state.tasks.get(event.task_id)
    if task is None or task.started_at is None:
        return None
    return (
        f"attempt {event.attempt} started again by {event.worker or 'another process'}: "
        f"{task.worker or 'the process'} that started it stopped before it ended"
    )
