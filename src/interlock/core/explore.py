"""Explore every path the engine can take through a pipeline, without running anything.

From a new run, every way the world can answer is tried: each task in flight completes, fails
(retryably or not) or times out, in every order; scheduled retries come due; pauses are
approved; and every condition is forced true and false through `decide`'s `evaluator`. The
engine itself decides what follows, so what is explored is exactly what the engine would do.

States are deduplicated by a signature that keeps what shapes the future (positions, visit
counts, task attempts and statuses) and drops what does not (times, texts, placeholder values).
The report lists states with no way forward, phases no path reaches, loops no bound ends, and
paths on which a condition or fan-out cannot be evaluated. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import Decision, RuleName, decide, settle
from interlock.core.expressions import ExpressionError, compile_expression
from interlock.core.loader import Definition
from interlock.core.state import RunState, RunStatus, TaskStatus, apply, artifact_name
from interlock.core.workflow import Extract, Pipeline

PLACEHOLDER_ITEMS = 2  # a fan-out list long enough to show lanes and the concurrency cap
_REPORTS_PER_TASK = ("complete", "fail", "fatal", "timeout")


@dataclass(frozen=True)
class ExploreReport:
    """What exploring a pipeline found; `problems` is empty when every path is sound."""

    problems: list[str]
    states: int  # distinct states explored
    complete: bool  # False when `max_states` stopped the search before every path was seen
    phases_reached: frozenset[str]
    delivered: bool = False  # some path delivers a result

    @property
    def sound(self) -> bool:
        """True when the whole space was explored and nothing is wrong."""
        return self.complete and not self.problems


class _NeedChoice(Exception):
    """A condition was reached whose outcome this trial has not fixed yet."""


class _Forced:
    """An evaluator that answers conditions from a fixed list of outcomes.

    A condition over a name with no value still fails as the real evaluator would, since that
    does not depend on what workers write.
    """

    def __init__(self, outcomes: list[bool]) -> None:
        self.outcomes = outcomes
        self.asked = 0

    def __call__(self, source: str, context: dict[str, Any]) -> bool:
        missing = compile_expression(source).names - context.keys()
        if missing:
            raise ExpressionError(
                f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value yet"
            )
        if self.asked == len(self.outcomes):
            raise _NeedChoice
        self.asked += 1
        return self.outcomes[self.asked - 1]


@dataclass
class _Node:
    state: RunState
    clock: float


@dataclass
class _Search:
    pipeline: Pipeline
    prefix: str
    max_states: int
    seen: set[Hashable] = field(default_factory=set)
    frontier: deque[_Node] = field(default_factory=deque)
    problems: dict[str, None] = field(default_factory=dict)  # ordered and without repeats
    reached: set[str] = field(default_factory=set)
    delivered: bool = False
    complete: bool = True

    def problem(self, text: str) -> None:
        self.problems[f"{self.prefix}{text}"] = None

    def add(self, node: _Node, decisions: list[Decision]) -> None:
        """Record a settled state, and queue it when it is new and may go on."""
        for decision in decisions:
            if decision.rule is RuleName.BRANCH_ERROR:
                self.problem(f"a run can fail on a path where {decision.why}")
        state = node.state
        self.reached |= set(state.visits)
        signature = _signature(state)
        if signature in self.seen:
            return
        if len(self.seen) >= self.max_states:
            self.complete = False
            return
        self.seen.add(signature)
        if state.status is RunStatus.DELIVERED:
            self.delivered = True
        if state.status.ended:
            return
        limit = _visit_limit(self.pipeline)
        for phase, count in state.visits.items():
            if count > limit:
                self.problem(
                    f"phase {phase!r}: a path visits it more than {limit} times; a loop through "
                    "it is not ended by any max_visits"
                )
                return
        why = stuck_reason(self.pipeline, state, node.clock)
        if why is not None:
            self.problem(why)
            return
        self.frontier.append(node)


def explore(
    definition_pipeline: Definition | Pipeline,
    *,
    name: str | None = None,
    max_states: int = 50_000,
) -> ExploreReport:
    """Explore every path from a new run and report what can go wrong.

    Args:
        definition_pipeline: a pinned definition, or a pipeline.
        name: the pipeline's name for messages (a definition brings its own). Without one,
            messages start at the phase, so a caller can prefix its own name.
        max_states: stop after this many distinct states (the report says it is incomplete).
    """
    if isinstance(definition_pipeline, Definition):
        pipeline, name = definition_pipeline.pipeline, name or definition_pipeline.name
    else:
        pipeline = definition_pipeline
    search = _Search(pipeline, f"pipeline {name!r}, " if name else "", max_states)
    start = RunState()
    inputs = {k: v.default for k, v in pipeline.inputs.items() if v.default is not None}
    apply(
        start,
        ev.RunCreated(
            at=0.0,
            run_id="check",
            pipeline=name or "",
            definition_hash="",
            topic="check",
            inputs=inputs,
        ),
    )
    for settled, decisions in _settle_all(search, start, None, 0.0):
        search.add(_Node(settled, 0.0), decisions)
    while search.frontier and search.complete:
        node = search.frontier.popleft()
        for event, clock in _moves(pipeline, node):
            for settled, decisions in _settle_all(search, node.state, event, clock):
                search.add(_Node(settled, clock), decisions)
    if search.complete:
        for phase in pipeline.phases:
            if phase.id not in search.reached:
                search.problem(f"phase {phase.id!r}: no path reaches it, so it can never run")
        if not search.delivered:
            search.problem(f"phase {pipeline.phases[-1].id!r}: no path delivers a result")
    return ExploreReport(
        problems=list(search.problems),
        states=len(search.seen),
        complete=search.complete,
        phases_reached=frozenset(search.reached),
        delivered=search.delivered,
    )


def stuck_reason(pipeline: Pipeline, state: RunState, now: float) -> str | None:
    """Why a run can never move again, or None when something can still happen.

    A run moves when it has ended or waits for a person, when a task is in flight or a retry is
    scheduled, or when the table has a decision.
    """
    if state.status.ended or state.status is RunStatus.PAUSED:
        return None
    waiting = any(
        t.status.in_flight or t.status is TaskStatus.RETRY_WAIT for t in state.tasks.values()
    )
    if waiting or decide(pipeline, state, now, evaluator=_Forced([True])):
        return None
    where = f"phase {state.current.phase!r}" if state.current else "the start"
    return (
        f"{where}: a run can get stuck here: nothing is running, nothing is scheduled and no "
        "rule applies"
    )


def _settle_all(
    search: _Search, state: RunState, event: ev.Event | None, now: float
) -> Iterator[tuple[RunState, list[Decision]]]:
    """Apply `event` to a copy of `state` and settle it, once per combination of outcomes."""
    pending: list[list[bool]] = [[]]
    while pending:
        outcomes = pending.pop()
        trial = _fork(state)
        if event is not None:
            apply(trial, event)
        try:
            decisions = settle(search.pipeline, trial, now, evaluator=_Forced(outcomes))
        except _NeedChoice:
            pending += [[*outcomes, False], [*outcomes, True]]
            continue
        except Exception as exc:  # a hand-built pipeline can break the engine; report, go on
            where = f"phase {state.current.phase!r}" if state.current else "the start"
            search.problem(f"{where}: the engine cannot go on: {type(exc).__name__}: {exc}")
            continue
        yield trial, decisions


def _fork(state: RunState) -> RunState:
    """`state.copy()`, sharing completed tasks: no event the explorer applies changes them.

    Copying only the open tasks keeps each trial cheap in runs that have done a lot already.
    """
    everything = state.tasks
    state.tasks = {k: t for k, t in everything.items() if t.status is not TaskStatus.COMPLETED}
    try:
        clone = state.copy()
    finally:
        state.tasks = everything
    clone.tasks = {k: clone.tasks.get(k, t) for k, t in everything.items()}  # dispatch order
    return clone


def _moves(pipeline: Pipeline, node: _Node) -> Iterator[tuple[ev.Event | None, float]]:
    """Every observation that can come next (None: time passes until a retry is due)."""
    state, clock = node.state, node.clock
    if state.status is RunStatus.PAUSED:
        yield ev.Approved(at=clock, by="check"), clock
    for task in state.in_flight():
        for kind in _REPORTS_PER_TASK:
            yield _report(pipeline, state, task.task_id, kind, clock), clock
    due = {t.not_before for t in state.tasks.values() if t.status is TaskStatus.RETRY_WAIT}
    for when in sorted(d for d in due if d is not None):
        yield None, max(clock, when)


def _report(pipeline: Pipeline, state: RunState, task_id: str, kind: str, at: float) -> ev.Event:
    task = state.tasks[task_id]
    if kind == "complete":
        worker = pipeline.worker(task.role)
        return ev.TaskCompleted(
            at=at,
            task_id=task_id,
            attempt=task.attempt,
            artifact=artifact_name(worker.output_name, task.visit, task.item),
            sha256="",
            size=0,
            values={
                k: _placeholder(pipeline, task.role, k, spec) for k, spec in worker.extract.items()
            },
        )
    if kind == "timeout":
        return ev.TaskTimedOut(at=at, task_id=task_id, attempt=task.attempt, detail="check")
    return ev.TaskFailed(
        at=at, task_id=task_id, attempt=task.attempt, error="check", retryable=kind == "fail"
    )


def _placeholder(pipeline: Pipeline, role: str, name: str, spec: Extract) -> Any:
    """A value of the declared type; conditions are forced, so only the type matters."""
    if spec.type == "number":
        return 0.0
    if spec.type == "bool":
        return False
    if spec.type == "string":
        return ""
    # A list that every fan-out over it accepts, so exploring does not invent max_items errors.
    limits = [
        p.for_each.max_items
        for p in pipeline.phases
        if p.for_each is not None and p.for_each.items == f"{role}.{name}"
    ]
    return [f"item {n + 1}" for n in range(min([PLACEHOLDER_ITEMS, *limits]))]


def _visit_limit(pipeline: Pipeline) -> int:
    """More visits than this to one phase can only come from a loop with no bound.

    Visit counts never reset, so each bounded rule adds at most `max_visits` visits in all.
    """
    return 1 + sum(r.max_visits or 0 for p in pipeline.phases for r in p.next)


def _signature(state: RunState) -> Hashable:
    """What decides a state's future; times, texts and placeholder values are left out."""
    if state.status.ended:
        return ("ended", state.status.value, state.archived)
    current = state.current
    position = None
    if current is not None:
        items = None if current.items is None else len(current.items)
        position = (current.phase, current.visit, items, current.completed, current.approved)
    # A completed task never runs again: how many attempts it took no longer matters. Whether a
    # failure was retryable is settled into the next attempt number before a state is kept.
    tasks = tuple(
        sorted(
            (t.task_id, "completed")
            if t.status is TaskStatus.COMPLETED
            else (t.task_id, t.attempt, t.status.value, t.model)
            for t in state.tasks.values()
        )
    )
    return (
        state.status.value,
        state.pause_reason,
        state.budget_waived,
        position,
        tuple(sorted(state.visits.items())),
        tasks,
        tuple(sorted(state.values)),
    )
