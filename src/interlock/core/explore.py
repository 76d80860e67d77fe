"""Explore every path the engine can take through a pipeline, without running anything.

From a new run, every way the world can answer is tried: each task in flight completes, fails
(retryably or not) or times out, in every order; scheduled retries come due; pauses are
approved; and every condition is forced true and false through `decide`'s `evaluator`. The
engine itself decides what follows, so what is explored is exactly what the engine would do.

States are deduplicated by a signature that keeps what shapes the future (positions, visit
counts, task attempts and statuses) and drops what does not (times, texts, placeholder values).
The report lists states with no way forward, phases no path reaches, loops no bound ends, and
paths on which a condition or fan-out cannot be evaluated. Pure: no I/O, no clock.

Trying every order of every report is exponential in the width of a phase: ten parallel
workers have 2**10 subsets of finished ones. The decision table reads which tasks ended how,
never in which order siblings finished, and a task's life (retries, fallbacks, giving up)
depends only on its own worker. So by default (`reduce=True`) the search takes one task at a
time (partial order): a task that has failed lives its whole life before any sibling moves,
and tasks whose workers are alike (same executor, timeouts, retries, backoff, models) are
interchangeable (symmetry): the first of each kind lives every life; then all untouched tasks
complete in one step. A phase of 10,000 alike workers then costs a handful of states, and the
same problems are found as by the full search (`reduce=False`), which tests compare.

Where every loop back is bounded, a run that has fewer visits of each phase than another at
the same place can do all it can, and stands for it (`Forgetting.dominates`). Runs that
skipped different phases behind them are not so ordered, and a chain of loops back mixed with
skips forward has one per set of phases skipped: past `WIDEN_AT` of them at one place, the
next is kept with the lowest count of each phase among them (`_Search.widen`), a run that can
do all each of them can and more. The search is then an over-approximation there: a problem
seen only on ways through a widened state, or a phase reached only there, says it may not be
so (`MAY`, `MAY_SEEN`), and the quote of such a search is a bound (`Ways.exact`).

Each trial is a lean fork (`interlock.core.trial`): it keeps only what the table reads and
shares the history until it writes to it, so a phase costs the same late in a pipeline of
thousands of phases as early in a short one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from interlock.core import events as ev
from interlock.core.decide import Decision, RuleName, decide, settle, waits_for_slot
from interlock.core.expressions import ExpressionError, compile_expression
from interlock.core.loader import Definition
from interlock.core.signal_checks import signals_read, unread_signal_data
from interlock.core.state import (
    RunState,
    RunStatus,
    TaskState,
    TaskStatus,
    apply,
    artifact_name,
)
from interlock.core.subpipelines import MAX_DEPTH
from interlock.core.tolerance import Tolerance, allowed_failures
from interlock.core.trial import Digested, SharedWrite, fork, track
from interlock.core.ways import Forgetting, Guards, Ways
from interlock.core.workflow import Extract, Pipeline, Worker

PLACEHOLDER_ITEMS = 2  # a fan-out list long enough to show lanes and the concurrency cap
# The longest list explored to pass a `tolerate` (a tolerance of more items is only held).
MAX_TOLERANCE_ITEMS = 64
_REPORTS_PER_TASK = ("complete", "fail", "fatal", "timeout")
PROGRESS_EVERY = 1000  # states between two calls of the `progress` callback
# More runs than this kept at one position, none able to do all another can: the next one
# is widened (`_Search.widen`). Small pipelines never get near it; a chain of loops back
# mixed with skips forward does, and without it keeps a state per set of phases skipped.
WIDEN_AT = 12
# What a problem seen only through widened states says of itself.
MAY = (
    " (maybe: check saw this only where it merged runs with different visit counts at one "
    "place, which lets them do more than each could)"
)
# What a problem says when only widened states' ways were seen to avoid it.
MAY_SEEN = (
    " (maybe: check saw otherwise only where it merged runs with different visit counts at "
    "one place, which lets them do more than each could)"
)
Progress = Callable[[int, int], None]
"""Told (states explored, states waiting) every `PROGRESS_EVERY` states of a long search."""


@dataclass(frozen=True)
class ExploreReport:
    """What exploring a pipeline found; `problems` is empty when every path is sound."""

    problems: list[str]
    states: int  # distinct states explored
    complete: bool  # False when `max_states` stopped the search before every path was seen
    phases_reached: frozenset[str]
    delivered: bool = False  # some path delivers a result
    unexplored: int = 0  # states found but not explored when `max_states` stopped the search
    # Each distinct count of visits per phase some state kept reached: what a run can have
    # done, path by path. A state stood for by one of fewer visits is not kept, so the cost
    # quote weighs `ways`, which has them all.
    visit_counts: frozenset[tuple[tuple[str, int], ...]] = frozenset()
    paused: bool = False  # some path pauses the run (for a person, or a signal or a time)
    # The worst case of each `pipeline` worker's child (role -> the child's report).
    children: dict[str, ExploreReport] = field(default_factory=dict)
    # Each phase with `tolerate` -> (some path goes on with a failed item, some path fails
    # past the tolerance): `check` explores both sides.
    tolerance: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    # The steps between the states explored, with the visits each added: what the cost quote
    # weighs, way by way (`visit_counts` holds only the states' own counts).
    ways: Ways = field(default_factory=Ways)
    # States that stand for several runs with different visit counts (their lowest each):
    # with any, what the search saw is more than the runs can do, and a problem seen only
    # through such states says it may not happen.
    widened: int = 0

    def not_covered(self, phases: Sequence[str]) -> str:
        """What a search stopped by `max_states` did not cover, in words (empty when complete)."""
        if self.complete:
            return ""
        missing = [p for p in phases if p not in self.phases_reached]
        text = (
            f"exploring stopped at {self.states:,} states (--max-states): paths through "
            f"{self.unexplored:,} more states were not followed"
        )
        if missing:
            text += f", and phases {', '.join(repr(p) for p in missing)} were not reached"
        if not self.delivered:
            text += ", and no delivery was seen yet"
        return text + "; problems there would not be reported: raise --max-states to cover them"

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
        self.sources: list[str] = []  # the conditions evaluated (for what reads signals)

    def __call__(self, source: str, context: Mapping[str, Any]) -> bool:
        missing = {n for n in compile_expression(source).names if n not in context}
        if missing:
            raise ExpressionError(
                f"expression {source!r} reads {', '.join(sorted(missing))}, which has no value yet"
            )
        self.sources.append(source)
        if self.asked == len(self.outcomes):
            raise _NeedChoice
        self.asked += 1
        return self.outcomes[self.asked - 1]


@dataclass
class _Node:
    state: RunState
    clock: float
    id: int = 0  # in `_Search.ways`


@dataclass
class _Search:
    pipeline: Pipeline
    prefix: str
    max_states: int
    reduce: bool = True
    progress: Progress | None = None
    overflow: int = 0  # new states refused by `max_states`
    kinds: dict[str, Hashable] = field(default_factory=dict)  # role -> kind of worker
    visit_limit: int = 0  # more visits to one phase than this: a loop nothing ends
    reports: dict[str, tuple[str, ...]] = field(default_factory=dict)  # role -> what it can say
    paused: bool = False
    seen: dict[Hashable, int] = field(default_factory=dict)  # signature -> id in `ways`
    ways: Ways = field(default_factory=Ways)
    forgetting: Forgetting | None = None
    # Position (the key without the counts) -> the kept states there: (id, `read_counts`).
    kept: dict[Hashable, list[tuple[int, Mapping[str, int]]]] = field(default_factory=dict)
    frontier: deque[_Node] = field(default_factory=deque)
    # Each problem (ordered, without repeats) -> the states on whose ways it was seen: with
    # widened states, it is certain only if one of those is reached without passing one.
    problems: dict[str, set[int]] = field(default_factory=dict)
    reached: dict[str, set[int]] = field(default_factory=dict)  # phase -> states it came from
    delivered: set[int] = field(default_factory=set)  # states a delivering step came from
    complete: bool = True
    # Signal -> the states whose steps read it after a wait took it.
    used: dict[str, set[int]] = field(default_factory=dict)
    at: int = 0  # the state being explored
    widened: set[int] = field(default_factory=set)  # states standing for several runs
    visit_counts: set[tuple[tuple[str, int], ...]] = field(default_factory=set)
    tolerated: set[str] = field(default_factory=set)  # phases where an item failed, tolerated
    past_tolerance: set[str] = field(default_factory=set)  # phases a run failed past it

    def problem(self, text: str, at: int = 0) -> None:
        """Note a problem seen on the ways through state `at` (0: the new run's)."""
        self.problems.setdefault(f"{self.prefix}{text}", set()).add(at)

    def add(self, node: _Node, decisions: list[Decision], parent: _Node | None) -> None:
        """Record a settled state and the step to it, and queue it when it is new and may go
        on (`parent`: the state it came from, None for the new run's first)."""
        came = parent.id if parent else 0
        for decision in decisions:
            failing = isinstance(decision.event, ev.RunFailed)
            if decision.rule is RuleName.BRANCH_ERROR or (
                decision.rule is RuleName.WAIT_TIMEOUT and failing
            ):
                self.problem(f"a run can fail on a path where {decision.why}", came)
            if decision.rule is RuleName.TOLERATE:
                assert isinstance(decision.event, ev.ItemFailed)
                self.tolerated.add(decision.event.phase)
            elif decision.rule is RuleName.PAST_TOLERANCE and node.state.current is not None:
                self.past_tolerance.add(node.state.current.phase)
        state = node.state
        assert isinstance(state.visits, Digested) and isinstance(state.values, Digested)
        written = state.visits.written  # since the parent, whose own were looked at before
        for name in written:
            self.reached.setdefault(name, set()).add(came)
        if state.status is RunStatus.DELIVERED:
            self.delivered.add(came)
        signature = _signature(state, self.forgetting)
        known = self.seen.get(signature)
        if parent is not None:
            before = parent.state.visits
            grown = ((p, state.visits[p] - before.get(p, 0)) for p in written)
            added = tuple(sorted((p, n) for p, n in grown if n))
        else:
            added = tuple(sorted(state.visits.items()))
        forgetting = self.forgetting
        dominated = forgetting is not None and forgetting.dominates
        guards = _guards(self.pipeline, parent, decisions) if dominated else ()
        widened = False
        if known is None and dominated and state.current is not None:
            assert forgetting is not None and isinstance(signature, tuple)
            counts = forgetting.read_counts(state.current.phase, state.visits)
            others = self.kept.get((signature[:7], signature[8:]), [])
            for kept, kept_visits in others:
                offset = forgetting.offset(kept_visits, counts)
                if offset is not None:
                    self.ways.add_step(came, kept, added, guards, offset)
                    return
            wider = self.widen(state, counts, others) if len(others) >= WIDEN_AT else None
            wider_signature = None if wider is None else _signature(wider, forgetting)
            # A widened run already kept is left alone: a step into it would not say which
            # visits it forgot, and a way could come round to it with more for ever.
            if wider is not None and wider_signature not in self.seen:
                state, signature, widened = wider, wider_signature, True
                node.state = wider
        if known is None and len(self.seen) >= self.max_states:
            self.complete = False
            self.overflow += 1
            return
        if known is not None:
            self.ways.add_step(came, known, added, guards)
            return
        if dominated:
            place = None if state.current is None else (state.current.phase, state.visits)
            node.id = self.ways.add_state(place)
        else:
            node.id = self.ways.add_state()
        self.ways.add_step(came, node.id, added, guards)
        if dominated and state.current is not None:
            assert isinstance(signature, tuple)
            position = (signature[:7], signature[8:])
            self.kept.setdefault(position, []).append((node.id, state.visits))
        self.seen[signature] = node.id
        if widened:
            self.widened.add(node.id)
            self.ways.widened = True
        else:  # a widened state's counts are no run's
            self.visit_counts.add(tuple(sorted(state.visits.items())))
        if self.progress is not None and len(self.seen) % PROGRESS_EVERY == 0:
            self.progress(len(self.seen), len(self.frontier))
        if state.status is RunStatus.PAUSED or state.waiting is not None:
            self.paused = True
        if state.status.ended:
            return
        limit = self.visit_limit
        phase = next((p for p in written if state.visits[p] > limit), None)
        if phase is not None:
            self.problem(
                f"phase {phase!r}: a path visits it more than {limit} times; a loop through "
                "it is not ended by any max_visits",
                node.id,
            )
            return
        why = stuck_reason(self.pipeline, state, node.clock)
        if why is not None:
            self.problem(why, node.id)
            return
        self.frontier.append(node)

    def widen(
        self,
        state: RunState,
        counts: Mapping[str, int],
        others: Sequence[tuple[int, Mapping[str, int]]],
    ) -> RunState | None:
        """A run like `state` whose counts are the lowest of its own and of each run kept at
        its position, so it can do all that each of them can: one state where a chain of
        loops back and skips forward would keep one per set of phases skipped (no other
        stands for it, the caller found). Counts read by a rule without a condition, and
        the current phase's (which names the current visit's tasks), are kept as they are,
        and so are the counts of a run with children (their records are named by visits).
        None when no count is lower."""
        forgetting = self.forgetting
        assert forgetting is not None and state.current is not None
        if state.children:
            return None
        caps, fixed = forgetting.caps, forgetting.exact | {state.current.phase}
        lowest = dict(counts)
        for _, visits in others:
            theirs = {p: min(visits.get(p, 0), caps[p]) for p in counts}
            if all(theirs[p] == counts[p] for p in counts if p in fixed):
                for p, n in theirs.items():
                    lowest[p] = min(lowest[p], n)
        lower = {p: n for p, n in lowest.items() if n < counts[p]}
        if not lower:
            return None
        wider = fork(state, ("visits",))
        for p, n in sorted(lower.items()):
            wider.visits[p] = n
        return wider

    def certain(self) -> set[int]:
        """The states some run reaches: those a way from the new run reaches without passing
        a widened state (all of them when none was widened)."""
        steps, widened = self.ways.steps, self.widened
        found, todo = {0}, [0]
        while todo:
            for child, *_ in steps[todo.pop()]:
                if child not in found and child not in widened:
                    found.add(child)
                    todo.append(child)
        return found

    def findings(self) -> tuple[list[str], set[str], bool]:
        """The problems, the phases reached and whether some path delivers. A problem seen
        only through widened states says it may not happen, and so does one that only a
        widened state's ways hide (a phase, a delivery or a signal's read seen only there)."""
        certain = self.certain() if self.widened else None

        def sure(ids: set[int]) -> bool:
            return certain is None or not ids.isdisjoint(certain)

        problems = [text if sure(at) else text + MAY for text, at in self.problems.items()]
        if not self.complete:
            return problems, set(self.reached), bool(self.delivered)
        prefix, pipeline = self.prefix, self.pipeline
        for phase in pipeline.phases:
            if phase.id not in self.reached:
                problems.append(
                    f"{prefix}phase {phase.id!r}: no path reaches it, so it can never run"
                )
            elif not sure(self.reached[phase.id]):
                problems.append(
                    f"{prefix}phase {phase.id!r}: no path reaches it, so it can never run{MAY_SEEN}"
                )
        last = pipeline.phases[-1].id
        if not self.delivered:
            problems.append(f"{prefix}phase {last!r}: no path delivers a result")
        elif not sure(self.delivered):
            problems.append(f"{prefix}phase {last!r}: no path delivers a result{MAY_SEEN}")
        every = unread_signal_data(pipeline, set(self.used))
        problems += [f"{prefix}{problem}" for problem in every]
        sure_used = {signal for signal, at in self.used.items() if sure(at)}
        for problem in unread_signal_data(pipeline, sure_used):
            if problem not in every:
                problems.append(f"{prefix}{problem}{MAY_SEEN}")
        return problems, set(self.reached), bool(self.delivered)


def explore(
    definition_pipeline: Definition | Pipeline,
    *,
    name: str | None = None,
    max_states: int = 50_000,
    reduce: bool = True,
    progress: Progress | None = None,
    depth: int = 0,
) -> ExploreReport:
    """Explore every path from a new run and report what can go wrong.

    A `pipeline` worker's child is explored first (to `MAX_DEPTH`): its problems are reported
    at the worker, its task completes only if the child can deliver, and its run pauses on
    the paths where the child can pause.

    Args:
        definition_pipeline: a pinned definition, or a pipeline.
        name: the pipeline's name for messages (a definition brings its own). Without one,
            messages start at the phase, so a caller can prefix its own name.
        max_states: stop after this many distinct states (the report says it is incomplete).
        reduce: skip orders of sibling reports that cannot change what happens (see the
            module's docstring); False tries every order, exponential in a phase's width.
        progress: called with (states explored, states waiting) every `PROGRESS_EVERY` states.
        depth: how deep in children this pipeline is (0: the pipeline run by a person).
    """
    if isinstance(definition_pipeline, Definition):
        pipeline, name = definition_pipeline.pipeline, name or definition_pipeline.name
    else:
        pipeline = definition_pipeline
    search = _Search(pipeline, f"pipeline {name!r}, " if name else "", max_states, reduce, progress)
    search.kinds = {w.role: _kind(w) for p in pipeline.phases for w in p.workers}
    search.visit_limit = _visit_limit(pipeline)
    search.forgetting = Forgetting.of(pipeline)
    if search.forgetting is not None:
        search.ways.caps = search.forgetting.caps
        search.ways.forgetting = search.forgetting
    child_reports = _explore_children(search, max_states, reduce, depth)
    for phase in pipeline.phases:
        for worker in phase.workers:
            if any(server.approve for server in worker.tools):
                # Its tool loop can stop at a call that waits for a person: the run pauses.
                search.reports[worker.role] = (*_REPORTS_PER_TASK, "tool_approval")
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
    track(start)
    for settled, decisions in _settle_all(search, start, (), 0.0):
        search.add(_Node(settled, 0.0), decisions, None)
    moves = _reduced_moves if reduce else _moves
    while search.frontier and search.complete:
        node = search.frontier.popleft()
        search.at = node.id
        for events, clock in moves(search, node):
            for settled, decisions in _settle_all(search, node.state, events, clock):
                search.add(_Node(settled, clock), decisions, node)
    problems, reached, delivered = search.findings()
    return ExploreReport(
        problems=problems,
        states=len(search.seen),
        complete=search.complete,
        phases_reached=frozenset(reached),
        delivered=delivered,
        unexplored=len(search.frontier) + search.overflow,
        visit_counts=frozenset(search.visit_counts),
        ways=search.ways,
        paused=search.paused,
        widened=len(search.widened),
        children=child_reports,
        tolerance={
            p.id: (p.id in search.tolerated, p.id in search.past_tolerance)
            for p in pipeline.phases
            if p.for_each is not None and p.for_each.tolerate is not None
        },
    )


def _explore_children(
    search: _Search, max_states: int, reduce: bool, depth: int
) -> dict[str, ExploreReport]:
    """Explore each `pipeline` worker's child; set what its task can report."""
    reports: dict[str, ExploreReport] = {}
    for phase in search.pipeline.phases:
        for worker in phase.workers:
            child = worker.pipeline_definition
            if child is None:
                continue
            place = f"phase {phase.id!r}, worker {worker.role!r}"
            if depth + 1 >= MAX_DEPTH:
                search.problem(f"{place}: children are nested more than {MAX_DEPTH} deep")
                search.reports[worker.role] = ("fail", "fatal")
                continue
            report = explore(child, max_states=max_states, reduce=reduce, depth=depth + 1)
            reports[worker.role] = report
            for problem in report.problems:
                search.problem(f"{place}, child pipeline {worker.child_name!r}: {problem}")
            kinds: tuple[str, ...] = ("fail", "fatal")
            if report.delivered or not report.complete:
                kinds = ("complete", *kinds)
            elif report.complete:
                search.problem(
                    f"{place}: its child pipeline {worker.child_name!r} can never deliver, so "
                    "the worker can never complete: fix the child (see its problems above)"
                )
            if report.paused:
                kinds = (*kinds, "child_paused")
            search.reports[worker.role] = kinds
    return reports


def stuck_reason(pipeline: Pipeline, state: RunState, now: float) -> str | None:
    """Why a run can never move again, or None when something can still happen.

    A run moves when it has ended or waits for a person, when a task is in flight or a retry is
    scheduled, or when the table has a decision.
    """
    if (
        state.status.ended
        or state.status is RunStatus.PAUSED
        or state.waiting is not None
        or waits_for_slot(pipeline, state)
        or state.task_slot_waits
    ):
        return None  # a person, a signal, the clock or another run of its key moves it
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


def _guards(pipeline: Pipeline, parent: _Node | None, decisions: list[Decision]) -> Guards:
    """How many visits below its bound each bounded rule a step took was (`Ways`)."""
    visits: Mapping[str, int] = parent.state.visits if parent is not None else {}
    since: dict[str, int] = {}  # counts the step has changed so far
    guards: list[tuple[str, int]] = []
    for decision in decisions:
        event = decision.event
        if isinstance(event, ev.PhaseStarted):
            since[event.phase] = event.visit
        elif isinstance(event, ev.BranchTaken) and event.rule is not None:
            rule = pipeline.phase(event.phase).next[event.rule - 1]
            if rule.max_visits is not None:
                count = since.get(rule.goto, visits.get(rule.goto, 0))
                guards.append((rule.goto, rule.max_visits - count))
    return tuple(guards)


def _settle_all(
    search: _Search, state: RunState, events: Sequence[ev.Event], now: float
) -> Iterator[tuple[RunState, list[Decision]]]:
    """Apply `events` to a copy of `state` and settle it, once per combination of outcomes."""
    pending: list[list[bool]] = [[]]
    while pending:
        outcomes = pending.pop()
        try:
            trial, decisions, conditions = _settle_one(
                search.pipeline, state, events, now, outcomes
            )
        except _NeedChoice:
            pending += [[*outcomes, False], [*outcomes, True]]
            continue
        except Exception as exc:  # a hand-built pipeline can break the engine; report, go on
            where = f"phase {state.current.phase!r}" if state.current else "the start"
            search.problem(
                f"{where}: the engine cannot go on: {type(exc).__name__}: {exc}", search.at
            )
            continue
        if trial.signals:
            _note_signal_reads(search, trial, decisions, conditions)
        yield trial, decisions


def _note_signal_reads(
    search: _Search, state: RunState, decisions: list[Decision], conditions: list[str]
) -> None:
    """Remember the signals that conditions and dispatched tasks read once a wait took them."""
    texts = list(conditions)
    for decision in decisions:
        if isinstance(decision.event, ev.TaskDispatched):
            worker = search.pipeline.worker(decision.event.role)
            texts += [worker.task, worker.system or "", *(worker.command or [])]
        elif isinstance(decision.event, ev.WaitStarted):
            phase = search.pipeline.phase(decision.event.phase)
            texts += [phase.not_before or ""]
    for text in texts:
        for signal in signals_read(text) & state.signals.keys():
            search.used.setdefault(signal, set()).add(search.at)


def _settle_one(
    pipeline: Pipeline,
    state: RunState,
    events: Sequence[ev.Event],
    now: float,
    outcomes: list[bool],
) -> tuple[RunState, list[Decision], list[str]]:
    """Fork `state`, apply `events` and settle: the trial, its decisions and the conditions
    it evaluated. A trial that writes to the history it shares with `state` (`trial.fork`)
    starts again with its own copy of that part."""
    own: set[str] = set()
    while True:
        trial = fork(state, own)
        forced = _Forced(outcomes)
        try:
            for event in events:
                apply(trial, event)
            return trial, settle(pipeline, trial, now, evaluator=forced), forced.sources
        except SharedWrite as write:
            if write.name in own:
                raise
            own.add(write.name)


Move = tuple[Sequence[ev.Event], float]  # observations at one instant (none: time passes)


def _moves(search: _Search, node: _Node) -> Iterator[Move]:
    """Every observation that can come next, in every order."""
    state, clock = node.state, node.clock
    if state.status is RunStatus.PAUSED:
        yield _go_on(state, clock), clock
    if waits_for_slot(search.pipeline, state):
        yield (ev.SlotTaken(at=clock, key="check"),), clock
    if state.task_slot_waits:
        yield _slots_taken(state, clock), clock
    if state.waiting is not None:
        yield from _wait_moves(state, clock)
        return
    for task in state.in_flight():
        for kind in _kinds(search, task):
            yield (_report(search.pipeline, state, task.task_id, kind, clock),), clock
    due = {t.not_before for t in state.tasks.values() if t.status is TaskStatus.RETRY_WAIT}
    for when in sorted(d for d in due if d is not None):
        yield (), max(clock, when)


def _slots_taken(state: RunState, clock: float) -> tuple[ev.Event, ...]:
    """Every attempt waiting for a slot of its task key gets one: other runs holding them
    end sooner or later, and in what order they free them changes nothing in this run."""
    return tuple(
        ev.TaskSlotTaken(at=clock, task_id=w.task_id, attempt=w.attempt, key=w.key)
        for w in state.task_slot_waits.values()
    )


def _reduced_moves(search: _Search, node: _Node) -> Iterator[Move]:
    """The observations that can change what happens, one representative order of each.

    Tasks still on their first attempt and unanswered are untouched. A touched task (failed,
    timed out, waiting for a retry) is followed alone until its life ends, so no two retry
    histories are interleaved. When every open task is untouched, the first task of the first
    kind of worker not yet seen to complete in this visit is tried every way, and all untouched
    tasks may complete together: the decision table counts what completed, not in what order.
    """
    state, clock = node.state, node.clock
    pipeline = search.pipeline
    if state.status is RunStatus.PAUSED:
        yield _go_on(state, clock), clock
    if waits_for_slot(pipeline, state):
        yield (ev.SlotTaken(at=clock, key="check"),), clock
    if state.task_slot_waits:
        yield _slots_taken(state, clock), clock
    if state.waiting is not None:
        yield from _wait_moves(state, clock)
        return
    untouched: list[TaskState] = []
    for task in state.tasks.values():
        if task.status.in_flight and task.attempt == 1:
            untouched.append(task)
        elif task.status.in_flight:
            for kind in _kinds(search, task):
                yield (_report(pipeline, state, task.task_id, kind, clock),), clock
            return
        elif task.status is TaskStatus.RETRY_WAIT and task.not_before is not None:
            yield (), max(clock, task.not_before)
            return
    if not untouched:
        return
    current = state.current
    done_kinds = {
        search.kinds.get(state.tasks[tid].role)
        for tid in (current.task_ids if current is not None else ())
        if tid in state.tasks and state.tasks[tid].status is TaskStatus.COMPLETED
    }
    first = next((t for t in untouched if search.kinds.get(t.role) not in done_kinds), None)
    if first is not None:
        for kind in _kinds(search, first):
            yield (_report(pipeline, state, first.task_id, kind, clock),), clock
    can_complete = all(
        "complete" in search.reports.get(t.role, _REPORTS_PER_TASK) for t in untouched
    )
    if (first is None or len(untouched) > 1) and can_complete:
        together = tuple(_report(pipeline, state, t.task_id, "complete", clock) for t in untouched)
        yield together, clock


def _kinds(search: _Search, task: TaskState) -> tuple[str, ...]:
    """How the task's attempt can end. A tool call waits for a person once per task: what
    a second wait could lead to, the first already did (and its attempts would not end)."""
    kinds = search.reports.get(task.role, _REPORTS_PER_TASK)
    if task.held:
        return tuple(k for k in kinds if k != "tool_approval")
    return kinds


def _go_on(state: RunState, clock: float) -> tuple[ev.Event, ...]:
    """What moves a paused run: a person's approval (of its waiting tool calls, when it
    paused for those), or its paused child going on."""
    if state.pause_reason == "tool":
        return tuple(
            ev.ToolCallDecided(
                at=clock,
                task_id=task_id,
                turn=int(waiting.get("turn", 1)),
                call=int(waiting.get("call", 1)),
                tool=str(waiting.get("tool", "")),
                approved=True,
                by="check",
            )
            for task_id, waiting in sorted(state.tool_waits.items())
        )
    child = state.held_by_child("paused") if state.pause_reason == "child" else None
    if child is None:
        return (ev.Approved(at=clock, by="check"),)
    task_id = next(k for k, v in state.children.items() if v is child)
    return (
        ev.ChildUpdated(
            at=clock, task_id=task_id, attempt=child.attempt, child_run=child.run, status="running"
        ),
    )


def _wait_moves(state: RunState, clock: float) -> Iterator[Move]:
    """A waiting run moves when its signal arrives, or when the wait's time comes."""
    waiting = state.waiting
    assert waiting is not None
    if waiting.signal is not None:
        yield (ev.SignalReceived(at=clock, name=waiting.signal, data={}),), clock
    if waiting.until is not None:
        yield (), max(clock, waiting.until)


def _kind(worker: Worker) -> Hashable:
    """What a task's life depends on: two workers of one kind live alike (names aside)."""
    return (
        worker.kind,
        worker.model,
        tuple(worker.fallback_models),
        worker.retries,
        worker.backoff,
        worker.timeout,
        worker.grace,
        worker.start_timeout,
    )


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
    if kind == "tool_approval":
        approval = {"turn": 1, "call": 1, "tool": "check", "arguments": "{}"}
        return ev.TaskFailed(
            at=at, task_id=task_id, attempt=task.attempt, error="check", approval=approval
        )
    if kind == "child_paused":
        return ev.ChildUpdated(
            at=at, task_id=task_id, attempt=task.attempt, child_run="check", status="paused"
        )
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
    # A list that every fan-out over it accepts, so exploring does not invent max_items errors,
    # and long enough that each `tolerate` over it can be both held and passed.
    over = [
        p.for_each
        for p in pipeline.phases
        if p.for_each is not None and p.for_each.items == f"{role}.{name}"
    ]
    wanted = max([PLACEHOLDER_ITEMS, *(_crossing(f.tolerate) for f in over)])
    return [f"item {n + 1}" for n in range(min([wanted, *(f.max_items for f in over)]))]


def _crossing(tolerance: Tolerance | None) -> int:
    """The fewest items on which `tolerance` lets one item fail and not all of them (a
    percentage of 100 lets all fail on any list; a large one is capped, `MAX_TOLERANCE_ITEMS`)."""
    if tolerance is None:
        return 0
    if isinstance(tolerance, int):
        return min(tolerance + 1, MAX_TOLERANCE_ITEMS)
    percent = Fraction(tolerance[:-1])
    if not 0 < percent < 100:
        return 0
    count = math.ceil(100 / percent)
    while allowed_failures(tolerance, count) >= count:
        count += 1
    return min(count, MAX_TOLERANCE_ITEMS)


def _visit_limit(pipeline: Pipeline) -> int:
    """More visits than this to one phase can only come from a loop with no bound.

    Visit counts never reset, so each bounded rule adds at most `max_visits` visits in all.
    """
    return 1 + sum(r.max_visits or 0 for p in pipeline.phases for r in p.next)


def _signature(state: RunState, forgetting: Forgetting | None = None) -> Hashable:
    """What decides a state's future; times, texts and placeholder values are left out, and
    with `forgetting`, the history no phase from here on can read (`interlock.core.ways`)."""
    if state.status.ended:
        return ("ended", state.status.value, state.archived)
    current = state.current
    position: tuple[Any, ...] | None = None
    if current is not None:
        items = None if current.items is None else len(current.items)
        position = (
            current.phase,
            current.visit,
            items,
            current.completed,
            current.approved,
            tuple(sorted(current.gates)),
        )
    waiting = None if state.waiting is None else (state.waiting.gate, state.waiting.signal)
    # A completed task never runs again: how many attempts it took no longer matters. Whether a
    # failure was retryable is settled into the next attempt number before a state is kept.
    # The tasks are those of the current visit and the open ones (`trial.fork`); the history
    # enters by its digests, so a key costs the same early and late in a long pipeline.
    assert isinstance(state.visits, Digested) and isinstance(state.values, Digested)
    visits: Hashable = state.visits.digest
    values: Hashable = state.values.digest  # which roles have values (not the placeholders)
    tasks: tuple[tuple[Any, ...], ...] = tuple(
        sorted(
            (t.task_id, "completed")
            if t.status is TaskStatus.COMPLETED
            else (t.task_id, t.attempt, t.status.value, t.model, t.held)
            for t in state.tasks.values()
        )
    )
    if forgetting is not None and current is not None:
        # Of the visit counts, only those of phases a run can still come to (which rules'
        # `max_visits` read); the rest are the way taken. Of the values, only those a phase
        # from here on may read.
        # No phase comes back (no loops): no rule reads a count.
        visits = forgetting.counts(current.phase, state.visits) if forgetting.loops else None
        values = tuple(sorted(r for r in forgetting.live[current.phase] if r in state.values))
        # The visit's number names its tasks and files, and no rule reads it but through the
        # counts above; a completed task of an earlier visit is never read again.
        assert position is not None
        position = (current.phase, *position[2:])
        tasks = tuple(
            sorted(
                _task_key(t, current.phase, current.visit)
                for t in state.tasks.values()
                if t.status is not TaskStatus.COMPLETED
                or (t.phase == current.phase and t.visit == current.visit)
            )
        )
    return (
        state.status.value,
        state.slot is not None,
        tuple(sorted((k, w.attempt) for k, w in state.task_slot_waits.items())),
        tuple(sorted((k, h.attempt) for k, h in state.task_slots.items())),
        state.pause_reason,
        state.budget_waived,
        position,
        visits,
        tasks,
        values,
        waiting,
        tuple(s.name for s in state.inbox),
        tuple(sorted((k, v is None) for k, v in state.signals.items())),
        tuple(sorted((k, c.attempt, c.status) for k, c in state.children.items())),
    )


def _task_key(task: TaskState, phase: str, visit: int) -> tuple[Any, ...]:
    """A task in a state's key: of the current visit by its role and item, else by its id."""
    current = task.phase == phase and task.visit == visit
    name = f"{task.role}#{'' if task.item is None else task.item}" if current else task.task_id
    if task.status is TaskStatus.COMPLETED:
        return (name, "completed")
    return (name, task.attempt, task.status.value, task.model, task.held)
