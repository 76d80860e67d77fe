"""The decision table: given a pinned pipeline, a run's state and the time, what happens next.

`decide` is pure: no I/O, no clock (time is an argument), no randomness (backoff jitter is
derived from the run, the task and the attempt). Rules are tried in the order of `TABLE`; the
first that applies returns its decisions, each naming the rule and saying why in words.
`settle` applies decisions and asks again until the table says "wait".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from interlock.core import events as ev
from interlock.core.context import Context
from interlock.core.expressions import ExpressionError, evaluate
from interlock.core.review import revisions
from interlock.core.state import (
    ENDED,
    RUN_DELIVERED,
    RUN_PAUSED,
    RUN_RUNNING,
    TASK_COMPLETED,
    TASK_FAILED,
    PhaseVisit,
    RunState,
    TaskState,
    TaskStatus,
    apply,
    clock_start,
    task_id_for,
)
from interlock.core.task_slots import gate
from interlock.core.tolerance import describe, outside_tolerance
from interlock.core.waits import decide_wait, signal_values, wake_time
from interlock.core.workflow import Backoff, Phase, Pipeline, Worker


class RuleName(StrEnum):
    """Why a decision was made; stored with each decided event."""

    START = "start"  # a new run starts its first phase
    ARCHIVE = "archive"  # a delivered run is archived
    TIMEOUT = "timeout"  # a task ran past timeout + grace, or did not start by start_timeout
    RETRY = "retry"  # a failed or timed-out attempt gets another, after backoff
    FALLBACK = "fallback"  # the model failed for good: try the next fallback model
    GIVE_UP = "give_up"  # no attempts left: the run fails
    BUDGET = "budget"  # the run reached its cost or token budget
    RETRY_DUE = "retry_due"  # a scheduled retry's backoff has passed: dispatch it
    DISPATCH = "dispatch"  # start a phase's tasks (in order, within its concurrency cap)
    PHASE_DONE = "phase_done"  # every task of the phase completed
    PAUSE = "pause"  # the phase has pause_after: wait for a person
    LOOP_BOUND = "loop_bound"  # a rule's max_visits was reached: skip it and warn
    BRANCH = "branch"  # go to the phase chosen by `next` (or the following one)
    BRANCH_ERROR = "branch_error"  # a condition or fan-out list could not be evaluated
    DELIVER = "deliver"  # the final phase completed: its output is the result
    REJECT = "reject"  # a person rejected the run at a review: its phase starts again
    REVISE = "revise"  # a task read an output edited at a review: it runs again
    WAIT = "wait"  # a phase waits for a signal or a time before it starts or after it ends
    SIGNAL = "signal"  # the signal a wait was waiting for arrived (or had arrived before)
    WAIT_TIMEOUT = "wait_timeout"  # a signal did not arrive in time: signals.NAME is null
    WAIT_DUE = "wait_due"  # a delay's due time came
    CHILD_PAUSED = "child_paused"  # a child run paused for a person: so does its parent
    CHILD_RESUMED = "child_resumed"  # the child that paused the run went on: so does the run
    TASK_SLOT = "task_slot"  # an attempt of a worker with `concurrency` waits for a slot first
    TOLERATE = "tolerate"  # a fan-out item failed for good within `tolerate`: the run goes on
    PAST_TOLERANCE = "past_tolerance"  # one more failed item than `tolerate` allows: run fails
    TOOL_APPROVAL = "tool_approval"  # a tool call of `approve` waits for a person: run pauses
    TOOL_DECIDED = "tool_decided"  # a person decided the call: the task's loop goes on


@dataclass(frozen=True, slots=True)
class Decision:
    """An event the engine decided to record, the rule that chose it, and why."""

    rule: RuleName
    event: ev.Event
    why: str


Evaluator = Callable[[str, Mapping[str, Any]], bool]
"""How conditions are evaluated; `check` passes one that explores every outcome."""


def decide(
    pipeline: Pipeline,
    state: RunState,
    now: float,
    *,
    evaluator: Evaluator = evaluate,
    archive: bool = True,
    reserve: Mapping[str, float] | None = None,
) -> list[Decision]:
    """The decisions for this instant; an empty list means wait (see `next_wake`).

    `archive` says whether a delivered run may be archived now: a runtime whose run folder
    is not yet durable holds the archive back until it is (an archived run is never looked
    at again), and asks again then. `reserve` is role -> the most one call of that worker can
    cost (USD): under a cost budget a task is dispatched only while that fits in what is left
    (`_within_budget`); a role not in it is dispatched as long as anything is left."""
    if state.status in ENDED:
        if state.status is RUN_DELIVERED and not state.archived and archive:
            return [Decision(RuleName.ARCHIVE, ev.Archived(at=now), "the result was delivered")]
        return []
    if state.inert:
        return []  # imported and not trusted: its definition is nobody's code yet
    if state.current is None:
        if waits_for_slot(pipeline, state):
            return []  # the runtime records SlotTaken once the key has room
        first = pipeline.phases[0]
        return [_start_phase(first, 1, None, now, RuleName.START, "the run was created")]
    lost = given_up(pipeline, state)
    if lost is not None:
        return _failing(pipeline, state, lost, now)
    tolerated = _tolerated(pipeline, state, now)
    if tolerated:
        return tolerated
    for rule in _RULES:
        decisions = rule(pipeline, state, now)
        if decisions:
            decisions = _gated(pipeline, state, decisions, now, evaluator)
            if decisions:
                return decisions
    waits = decide_wait(
        pipeline,
        state,
        now,
        lambda: expression_context(state, pipeline),
        exploring=evaluator is not evaluate,
    )
    if waits is not None:  # a wait starts, ends, or holds the run (no rows)
        return [Decision(RuleName(rule), event, why) for rule, event, why in waits]
    decisions = _dispatch(pipeline, state, now)
    if reserve:
        decisions = _within_budget(pipeline, state, decisions, now, reserve)
    if decisions:
        decisions = _gated(pipeline, state, decisions, now, evaluator)
        if decisions:
            return decisions
    if state.revisions and state.status is RUN_RUNNING:
        ready, pending = revisions(pipeline, state)
        if pending:  # edited at a review: what read the old version runs again first
            revised = [_revise(pipeline, task, changed, now) for task, changed in ready]
            return _gated(pipeline, state, revised, now, evaluator)
    return _phase_end(pipeline, state, now, evaluator)


def _gated(
    pipeline: Pipeline,
    state: RunState,
    decisions: list[Decision],
    now: float,
    evaluator: Evaluator,
) -> list[Decision]:
    """Dispatches of workers with a concurrency key, each behind its slot (`core.task_slots`):
    an attempt without one is recorded as waiting (once), and is dispatched once it has one.
    `check` explores with placeholder inputs: there the key's value is a placeholder too."""
    if not decisions or not (state.task_slot_waits or pipeline.task_keys):
        return decisions
    kept = []
    for decision in decisions:
        if not isinstance(decision.event, ev.TaskDispatched):
            kept.append(decision)
            continue
        event, why = gate(pipeline, state, decision.event, now, exploring=evaluator is not evaluate)
        if event is decision.event:
            kept.append(decision)
        elif isinstance(event, ev.RunFailed):
            return [Decision(RuleName.TASK_SLOT, event, why)]
        elif event is not None:
            kept.append(Decision(RuleName.TASK_SLOT, event, why))
    return kept


def waits_for_slot(pipeline: Pipeline, state: RunState) -> bool:
    """A new run of a pipeline with `concurrency` starts only once it has a slot."""
    return (
        pipeline.concurrency is not None
        and state.slot is None
        and state.current is None
        and state.status is RUN_RUNNING
    )


def _children(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    """A run pauses while one of its child runs is paused, and goes on when none is."""
    paused = state.held_by_child("paused")
    if state.status is RUN_RUNNING and paused is not None and state.current is not None:
        event: ev.Event = ev.Paused(
            at=now, phase=state.current.phase, visit=state.current.visit, reason="child"
        )
        why = f"child run {paused.run} is paused" + (f" ({paused.detail})" if paused.detail else "")
        return [Decision(RuleName.CHILD_PAUSED, event, why)]
    if state.status is RUN_PAUSED and state.pause_reason == "child" and paused is None:
        why = "the child run that paused it went on"
        return [Decision(RuleName.CHILD_RESUMED, ev.Resumed(at=now, reason=why), why)]
    return []


def _tool_calls(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    """A task whose tool loop stopped at a call of an `approve` tool pauses the run until
    a person decides the call; a task whose call was decided gets its next attempt at once,
    which continues the loop from the task's journal (no retry: `TaskState.held`)."""
    if not state.awaiting:
        return []
    if state.tool_waits:
        if state.status is not RUN_RUNNING or state.current is None:
            return []
        task_id, waiting = next(iter(state.tool_waits.items()))
        event: ev.Event = ev.Paused(
            at=now, phase=state.current.phase, visit=state.current.visit, reason="tool"
        )
        arguments = str(waiting.get("arguments", ""))
        shown = arguments if len(arguments) <= 200 else arguments[:200] + "..."
        why = (
            f"task {task_id} asks to call tool {waiting.get('tool')!r} with {shown} (turn "
            f"{waiting.get('turn')}, call {waiting.get('call')}), which waits for approval: "
            f"interlock approve --call {task_id}/{waiting.get('turn')}/{waiting.get('call')}"
        )
        return [Decision(RuleName.TOOL_APPROVAL, event, why)]
    decisions = []
    for task in state.in_group(state.awaiting):
        event = ev.RetryScheduled(
            at=now, task_id=task.task_id, attempt=task.attempt + 1, not_before=now, model=task.model
        )
        why = f"the tool call {task.task_id} waited for was decided: its tool loop goes on"
        decisions.append(Decision(RuleName.TOOL_DECIDED, event, why))
    return decisions


def _rejected(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    to = state.reject_to
    if to is None or state.status is not RUN_RUNNING:
        return []
    phase = pipeline.phase(to)
    items, problem = _fan_out_items(phase, state)
    if problem is not None:
        return [Decision(RuleName.BRANCH_ERROR, ev.RunFailed(at=now, reason=problem), problem)]
    visit = state.visits.get(to, 0) + 1
    why = f"rejected at review: back to {to!r} (visit {visit})"
    return [_start_phase(phase, visit, items, now, RuleName.REJECT, why)]


def _revise(pipeline: Pipeline, task: TaskState, changed: str, now: float) -> Decision:
    worker = pipeline.worker(task.role)
    event = ev.TaskDispatched(
        at=now,
        task_id=task.task_id,
        phase=task.phase,
        role=task.role,
        visit=task.visit,
        item=task.item,
        attempt=task.attempt + 1,
        model=worker.model_for_attempt(1),
    )
    why = f"{task.task_id} read {changed}, which changed at review: it runs again"
    return Decision(RuleName.REVISE, event, why)


def settle(
    pipeline: Pipeline,
    state: RunState,
    now: float,
    *,
    evaluator: Evaluator = evaluate,
    archive: bool = True,
    reserve: Mapping[str, float] | None = None,
) -> list[Decision]:
    """Apply decisions to `state` until the table says wait; returns all of them in order
    (`archive`, `reserve`: see `decide`)."""
    made: list[Decision] = []
    for _ in range(100_000):  # a bound that no sound pipeline reaches in one instant
        decisions = decide(
            pipeline, state, now, evaluator=evaluator, archive=archive, reserve=reserve
        )
        if not decisions:
            return made
        for decision in decisions:
            apply(state, decision.event)
        made += decisions
    raise RuntimeError("the engine did not settle: this is a bug, please report it")


def next_wake(pipeline: Pipeline, state: RunState) -> float | None:
    """The earliest time the table would act without a new observation (None: never).

    Only what `decide` acts on by then counts: a time held back (a retry while the run is
    paused, or fails once its running attempts end, or waits for a task slot) would wake a
    runtime that sleeps until it at once, to find nothing to do, again and again. So after
    `settle` at `now`, the time given is later than `now`, and at it the table acts.
    """
    if state.status in ENDED or state.inert:
        return None  # `decide` acts on neither by itself (an archive is asked for at once)
    times = []
    due = state.earliest_deadline(
        lambda t: _deadline(pipeline, t), pipeline.shortest_deadline, pipeline.shortest_start
    )
    if due is not None:
        times.append(due)  # timeouts fire whatever holds the rest (see `_failing`)
    # A paused run holds its retries until approval, and a run failing because of a task that
    # has no attempt left holds them for good, waiting only for the attempts under way
    # (`_failing`): waking for them would find nothing to do, and a retry already due would
    # hide the deadline the run waits for. A retry waiting for its task slot is woken by the
    # slot, not by the clock.
    if state.status is RUN_RUNNING and given_up(pipeline, state) is None:
        times += [
            t.not_before
            for t in state.in_group(state.retrying)
            if t.not_before is not None and not _awaits_slot(state, t)
        ]
        due = wake_time(state)
        if due is not None:
            times.append(due)
    return min(times) if times else None


def _awaits_slot(state: RunState, task: TaskState) -> bool:
    """Whether the task's attempt waits for a slot of its concurrency key: once that is
    recorded, its due retry is held until the slot is taken (`core.task_slots.gate`)."""
    waiting = state.task_slot_waits.get(task.task_id)
    return waiting is not None and waiting.attempt == task.attempt


def _deadline(pipeline: Pipeline, task: TaskState) -> float:
    """When the engine gives up on the task's current attempt.

    A started attempt has `timeout + grace` from its start (its worker stops it at `timeout`;
    the grace covers a worker that died or a report that was lost), the time its model call
    waited in provider batches not counted. One not started yet may
    wait `start_timeout` from its dispatch, for a free slot or worker: a phase wider than the
    concurrency waits its turn, and only a dispatch that was lost waits past it.
    """
    worker = pipeline.worker(task.role)
    if worker.pipeline is not None:
        # A child run is bounded by its own tasks' limits, and may wait for a person for days.
        return math.inf
    if task.started_at is None:
        return task.dispatched_at + worker.start_deadline
    if task.batch_since is not None:
        # Its model call waits in a provider batch: the provider's own expiry (24 h) ends
        # that wait; the timeout covers the attempt's own work, before and after it.
        return math.inf
    return clock_start(task) + worker.timeout + worker.grace


def _timeouts(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    shortest_run, shortest_start = pipeline.shortest_deadline, pipeline.shortest_start
    started, queued = _latest_since(now, shortest_run), _latest_since(now, shortest_start)
    return [
        _timed_out(pipeline, t, now)
        for t in state.flight_since(started, queued)
        if now >= _deadline(pipeline, t)
    ]


def _latest_since(now: float, shortest: float) -> float:
    """The latest start (or dispatch) of an attempt that may be past its deadline at `now`,
    when no deadline is less than `shortest` after it.

    `now - shortest` alone is not that bound: `_deadline` rounds `since + limit` (twice for
    `timeout + grace`), and `(since + 45) - 45` may come out below `since`, so at the very
    time `next_wake` names the attempt would not be looked at. A few units in the last place
    of the largest value in those sums cover every rounding; a timeout still fires only once
    `now` reaches the deadline as `_deadline` computes it, never before.
    """
    return now - shortest + 4 * math.ulp(abs(now) + shortest)


def _timed_out(pipeline: Pipeline, task: TaskState, now: float) -> Decision:
    """The timeout of an attempt past its deadline, saying which deadline passed."""
    worker = pipeline.worker(task.role)
    if task.started_at is None:
        detail = f"not started within start_timeout ({worker.start_deadline:g}s)"
        why = f"task {task.task_id} attempt {task.attempt} was not started in time"
    else:
        detail = f"no result within timeout + grace ({worker.timeout + worker.grace:g}s)"
        why = f"task {task.task_id} attempt {task.attempt} passed its deadline"
    event = ev.TaskTimedOut(at=now, task_id=task.task_id, attempt=task.attempt, detail=detail)
    return Decision(RuleName.TIMEOUT, event, why)


def _next_attempt(worker: Worker, task: TaskState) -> int:
    """The attempt a failed task would make next: the next one of its model, or the first
    of the next fallback model when the failure was not worth retrying. Attempts that only
    waited for a person's decision on a tool call (`held`) count in the number, not in the
    model's retries."""
    per_model = worker.retries + 1
    if not task.retryable:
        counted = task.attempt - task.held
        return ((counted - 1) // per_model + 1) * per_model + 1 + task.held
    return task.attempt + 1


def given_up(pipeline: Pipeline, state: RunState) -> TaskState | None:
    """The first failed task that has no attempt left and that its fan-out's `tolerate` does
    not cover (the run fails because of it)."""
    if not state.failing:  # asked on every tick and before every start: most runs have none
        return None
    for task in state.in_group(state.failing):
        if _exhausted(pipeline, task) and not _tolerable(pipeline, state, task):
            return task
    return None


def _exhausted(pipeline: Pipeline, task: TaskState) -> bool:
    worker = pipeline.worker(task.role)
    return _next_attempt(worker, task) - task.held > worker.max_attempts


def _tolerable(pipeline: Pipeline, state: RunState, task: TaskState) -> bool:
    """Whether the task's item may fail for good while the run goes on: it is an item of the
    current visit of a phase with `tolerate`, and with it the visit's failed items are still
    within the tolerance (an item failed already counts once, whichever of its lane's tasks
    failed).

    Not a re-run after an edit at a review (its item had completed, and what read it may
    have gone on), nor a task of a visit that has completed: those fail the run as before."""
    current = state.current
    if task.item is None or current is None or current.items is None:
        return False
    if current.completed or task.revising:
        return False
    if (current.phase, current.visit) != (task.phase, task.visit):
        return False
    for_each = pipeline.phase(task.phase).for_each
    if for_each is None or for_each.tolerate is None:
        return False
    failed = len(current.failed_items) + (task.item not in current.failed_items)
    return not outside_tolerance(for_each.tolerate, failed, len(current.items))


def _tolerated(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    """The first task out of attempts that its fan-out tolerates: its item is recorded as
    failed (one at a time, so that each one is counted against what the ones before left)."""
    if not state.failing:
        return []
    for task in state.in_group(state.failing):
        if not _exhausted(pipeline, task) or not _tolerable(pipeline, state, task):
            continue
        current, for_each = state.current, pipeline.phase(task.phase).for_each
        # (`_tolerable` held: an item of the current visit of a phase with `tolerate`.)
        assert current is not None and current.items is not None and task.item is not None
        assert for_each is not None
        failed = len(current.failed_items) + (task.item not in current.failed_items)
        event = ev.ItemFailed(
            at=now,
            task_id=task.task_id,
            phase=task.phase,
            visit=task.visit,
            item=task.item,
            error=task.error or "",
            failed=failed,
        )
        why = (
            f"item {task.item} of phase {task.phase!r} failed for good ({task.task_id} after "
            f"{task.attempt} attempt(s): {task.error}); {failed} failed item(s) within "
            f"{describe(for_each.tolerate, len(current.items))}"
        )
        return [Decision(RuleName.TOLERATE, event, why)]
    return []


def still_running(pipeline: Pipeline, state: RunState, lost: TaskState) -> list[TaskState]:
    """The attempts the run waits for before it fails because of `lost`: those that had
    started by the time it failed. Not a child run, which may wait for a person for days:
    it is cancelled with the run, as before."""
    failed_at = lost.failed_at if lost.failed_at is not None else math.inf
    return [
        t
        for t in state.in_flight()
        if t.started_at is not None
        and t.started_at <= failed_at
        and pipeline.worker(t.role).pipeline is None
    ]


def _failing(pipeline: Pipeline, state: RunState, lost: TaskState, now: float) -> list[Decision]:
    """A task failed for good: the run fails once the attempts that had started before it
    failed have ended, so that what they were paid for is recorded and a rerun reuses it
    instead of paying again. Meanwhile nothing else starts or is retried; an attempt that
    passes its deadline still times out. Attempts not started by then are abandoned."""
    timeouts = _timeouts(pipeline, state, now)
    if timeouts:
        return timeouts
    if still_running(pipeline, state, lost):
        return []
    reason = f"task {lost.task_id} failed after {lost.attempt} attempt(s): {lost.error}"
    rule, past = RuleName.GIVE_UP, past_tolerance(pipeline, state, lost)
    if past is not None:
        rule, reason = RuleName.PAST_TOLERANCE, f"{past}; {reason}"
    event = ev.RunFailed(at=now, reason=reason, task_id=lost.task_id)
    return [Decision(rule, event, reason)]


def past_tolerance(pipeline: Pipeline, state: RunState, lost: TaskState) -> str | None:
    """How many items of the current fan-out failed, and which, when `lost` takes them past
    the phase's `tolerate` (None: `lost` is not an item of a phase with a tolerance)."""
    current = state.current
    if lost.item is None or current is None or current.items is None:
        return None
    if (current.phase, current.visit) != (lost.phase, lost.visit):
        return None
    if current.completed or lost.revising:
        return None  # no tolerance covers it (`_tolerable`)
    for_each = pipeline.phase(lost.phase).for_each
    if for_each is None or for_each.tolerate is None:
        return None
    items = sorted({*current.failed_items, lost.item})
    shown = ", ".join(str(i) for i in items[:_LISTED])
    if len(items) > _LISTED:
        shown += f" and {len(items) - _LISTED} more"
    return (
        f"phase {lost.phase!r} visit {lost.visit}: {len(items)} of {len(current.items)} items "
        f"failed, past {describe(for_each.tolerate, len(current.items))}; failed items: {shown}"
    )


_LISTED = 20  # failed items a failure's reason names; `status` and `explain` list them all


def _failures(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    if not state.failing:
        return []
    decisions = []
    for task in state.in_group(state.failing):
        worker = pipeline.worker(task.role)
        per_model = worker.retries + 1
        switching = not task.retryable or (task.attempt - task.held) % per_model == 0
        attempt = _next_attempt(worker, task)
        model = worker.model_for_attempt(attempt - task.held)
        if switching and worker.model is not None:
            rule, delay = RuleName.FALLBACK, 0.0
            why = f"model {task.model!r} failed for good ({task.error}); trying {model!r}"
        else:
            rule, delay = RuleName.RETRY, backoff_delay(worker.backoff, state.run_id, task, attempt)
            if task.status is TASK_FAILED and task.not_before is not None:
                # The provider said when it takes calls again: never sooner than that.
                delay = max(delay, task.not_before - now)
            why = (
                f"attempt {task.attempt} {task.status.value} ({task.error}); retry in {delay:.2f}s"
            )
        event = ev.RetryScheduled(
            at=now, task_id=task.task_id, attempt=attempt, not_before=now + delay, model=model
        )
        decisions.append(Decision(rule, event, why))
    return decisions


def backoff_delay(backoff: Backoff, run_id: str, task: TaskState, attempt: int) -> float:
    """Capped exponential backoff with jitter seeded by run, task and attempt.

    Seeding (instead of `random`) keeps `decide` pure: replaying the history gives the same
    delay, while different runs and tasks still spread out their retries.
    """
    base = min(backoff.max, backoff.initial * backoff.multiplier ** max(0, attempt - 2))
    digest = hashlib.sha256(f"{run_id}/{task.task_id}/{attempt}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2**64
    return max(0.0, base * (1 + backoff.jitter * (2 * unit - 1)))


def _budget(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    budget = pipeline.budget
    if budget is None or state.budget_waived or state.status is not RUN_RUNNING:
        return []
    over = []
    if budget.max_cost_usd is not None and state.cost_usd >= budget.max_cost_usd:
        over.append(f"cost ${state.cost_usd:.4f} reached the budget of ${budget.max_cost_usd:g}")
    if budget.max_tokens is not None and state.tokens >= budget.max_tokens:
        over.append(f"{state.tokens} tokens reached the budget of {budget.max_tokens}")
    if not over:
        return []
    why = "; ".join(over)
    assert state.current is not None
    event: ev.Event
    if budget.on_exceed == "pause":
        event = ev.Paused(
            at=now, phase=state.current.phase, visit=state.current.visit, reason="budget"
        )
    else:
        event = ev.RunFailed(at=now, reason=f"budget exceeded: {why}")
    return [Decision(RuleName.BUDGET, event, why)]


def _within_budget(
    pipeline: Pipeline,
    state: RunState,
    decisions: list[Decision],
    now: float,
    reserve: Mapping[str, float],
) -> list[Decision]:
    """The dispatches whose call fits in the cost budget: recorded spend, plus the worst
    case of every task in flight (its call may still be answered), plus its own worst case.
    One that does not fit waits while other tasks run (their spend is then known); with
    nothing in flight the run pauses or fails as the budget says, naming the call."""
    budget = pipeline.budget
    if not decisions or budget is None or budget.max_cost_usd is None or state.budget_waived:
        return decisions
    limit = budget.max_cost_usd
    # Summed in dispatch order (`flight` keeps it): the same state always gives the same sum.
    held = state.cost_usd + sum(reserve.get(state.tasks[t].role, 0.0) for t in state.flight)
    kept: list[Decision] = []
    first: tuple[str, float, float] | None = None  # the first call held back
    for decision in decisions:
        dispatched = decision.event
        if not isinstance(dispatched, ev.TaskDispatched) or dispatched.role not in reserve:
            kept.append(decision)
            continue
        worst = reserve[dispatched.role]
        if held + worst <= limit:
            held += worst
            kept.append(decision)
        elif first is None:
            first = (dispatched.role, worst, max(0.0, limit - held))
    if first is None or kept or state.flight:
        return kept
    assert state.current is not None
    role, worst, left = first
    why = (
        f"the next call of {role!r} may cost up to ${worst:.4f} and ${left:.4f} is left of "
        f"the budget ${limit:.4f}"
    )
    event: ev.Event
    if budget.on_exceed == "pause":
        event = ev.Paused(
            at=now, phase=state.current.phase, visit=state.current.visit, reason="budget"
        )
    else:
        event = ev.RunFailed(at=now, reason=f"budget exceeded: {why}")
    return [Decision(RuleName.BUDGET, event, why)]


def _retries_due(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    if state.status is not RUN_RUNNING:
        return []
    return [
        Decision(
            RuleName.RETRY_DUE,
            ev.TaskDispatched(
                at=now,
                task_id=t.task_id,
                phase=t.phase,
                role=t.role,
                visit=t.visit,
                item=t.item,
                attempt=t.attempt,
                model=t.model,
            ),
            f"backoff for attempt {t.attempt} of {t.task_id} has passed",
        )
        for t in state.in_group(state.retrying)
        if t.not_before is not None and now >= t.not_before
    ]


def planned_tasks(
    phase: Phase, visit: int, items: list[Any] | None
) -> Iterator[tuple[Worker, int | None, str]]:
    """Every (worker, item, task id) of a phase visit, lane by lane (one lane per item)."""
    for item in range(len(items)) if items is not None else (None,):
        for worker in phase.workers:
            yield worker, item, task_id_for(worker.role, visit, item)


def planned_count(phase: Phase, items: list[Any] | None) -> int:
    """How many tasks a phase visit has."""
    return len(phase.workers) * (1 if items is None else len(items))


def _planned_from(
    phase: Phase, visit: int, items: list[Any] | None, start: int
) -> Iterator[tuple[Worker, int | None, str]]:
    """`planned_tasks` from the `start`-th task on, without walking those before it."""
    workers = phase.workers
    for index in range(start, planned_count(phase, items)):
        lane, worker = divmod(index, len(workers))
        item = None if items is None else lane
        yield workers[worker], item, task_id_for(workers[worker].role, visit, item)


def _dispatch(pipeline: Pipeline, state: RunState, now: float) -> list[Decision]:
    current = state.current
    if state.status is not RUN_RUNNING or current is None or current.completed:
        return []
    phase = pipeline.phase(current.phase)
    cap = phase.for_each.concurrency if phase.for_each else None
    dispatched = len(current.task_ids)
    active = dispatched - current.done - current.failed_tasks
    planned: Iterator[tuple[Worker, int | None, str]]
    in_order = not pipeline.task_keys  # see `_is_prefix`
    if (
        phase.mode == "parallel"
        and in_order
        and _is_prefix(phase, current.visit, current.items, current)
    ):
        # A parallel phase dispatches in plan order, so what it dispatched is a prefix of the
        # plan: the scan starts after it (what makes a wide phase cost per task, not per tick).
        if dispatched == planned_count(phase, current.items) or (cap and active >= cap):
            return []
        planned = _planned_from(phase, current.visit, current.items, dispatched)
    else:
        planned = planned_tasks(phase, current.visit, current.items)
    decisions = []
    # A lane whose item failed for good (`tolerate`) starts nothing more.
    lane_blocked: set[int | None] = set(current.failed_items)
    for worker, item, tid in planned:
        task = state.tasks.get(tid)
        if task is not None:
            if phase.mode == "sequential" and task.status is not TASK_COMPLETED:
                lane_blocked.add(item)  # the next worker of this lane waits for this one
            continue
        if cap is not None and active >= cap:
            break  # `active` only grows: nothing further can start now
        if item in lane_blocked:
            continue
        if phase.mode == "sequential":
            lane_blocked.add(item)
        active += 1
        label = f" item {item}" if item is not None else ""
        event = ev.TaskDispatched(
            at=now,
            task_id=tid,
            phase=phase.id,
            role=worker.role,
            visit=current.visit,
            item=item,
            attempt=1,
            model=worker.model_for_attempt(1),
        )
        why = f"phase {phase.id!r} visit {current.visit}{label}: {worker.role} is ready"
        decisions.append(Decision(RuleName.DISPATCH, event, why))
    return decisions


def _is_prefix(phase: Phase, visit: int, items: list[Any] | None, current: PhaseVisit) -> bool:
    """Whether the visit's dispatched tasks are the first ones of its plan (checked at the
    last: tasks are recorded in plan order, so the last one in place means all are).

    A worker with a concurrency key breaks that order: its task waits for a slot while the
    tasks after it are dispatched, and is recorded once it has one. The last task recorded
    can then sit in place while an earlier one still waits, so the phases of a pipeline with
    such workers are scanned whole (`_dispatch`).
    """
    count = len(current.task_ids)
    if count == 0:
        return True
    if count > planned_count(phase, items):
        return False
    last = next(_planned_from(phase, visit, items, count - 1))
    return last[2] == current.task_ids[-1]


def _phase_end(
    pipeline: Pipeline, state: RunState, now: float, evaluator: Evaluator
) -> list[Decision]:
    current = state.current
    assert current is not None
    phase = pipeline.phase(current.phase)
    if not current.completed:
        # `done` counts the completed tasks among those dispatched, all of them planned ones.
        planned = planned_count(phase, current.items)
        if current.failed_items:
            done, why = _done_but_failed(phase, state, current, planned)
        else:
            done = current.done == planned and len(current.task_ids) == planned
            why = f"all {planned} task(s) completed"
        if not done or state.status is not RUN_RUNNING:
            return []
        event: ev.Event = ev.PhaseCompleted(at=now, phase=phase.id, visit=current.visit)
        return [Decision(RuleName.PHASE_DONE, event, why)]
    if state.status is not RUN_RUNNING:
        return []
    if phase.pause_after and not current.approved:
        event = ev.Paused(at=now, phase=phase.id, visit=current.visit)
        return [Decision(RuleName.PAUSE, event, f"phase {phase.id!r} has pause_after")]
    if phase is pipeline.phases[-1]:
        final = pipeline.final_worker
        tid = task_id_for(final.role, current.visit, None)
        artifact = state.tasks[tid].artifact or final.output_name
        event = ev.Delivered(at=now, task_id=tid, artifact=artifact)
        return [Decision(RuleName.DELIVER, event, f"final worker {final.role!r} completed")]
    return _branch(pipeline, state, phase, now, evaluator)


def _done_but_failed(
    phase: Phase, state: RunState, current: PhaseVisit, planned: int
) -> tuple[bool, str]:
    """Whether a visit with failed items is done: every task of the other lanes completed,
    and nothing of a failed lane still runs or waits for a retry (what a failed lane had
    not started never starts). Costs the failed lanes' width, not the phase's."""
    width = len(phase.workers)
    completed_in_failed = 0
    for item in current.failed_items:
        for worker in phase.workers:
            task = state.tasks.get(task_id_for(worker.role, current.visit, item))
            if task is None:
                continue
            if task.status is TASK_COMPLETED:
                completed_in_failed += 1
            elif task.status in _OPEN:
                return False, ""
    failed = len(current.failed_items)
    others = planned - failed * width
    done = current.done - completed_in_failed == others
    total = 0 if current.items is None else len(current.items)
    why = (
        f"{total - failed} of {total} item(s) completed ({others} task(s)); "
        f"{failed} item(s) failed within the phase's tolerate"
    )
    return done, why


_OPEN = frozenset(  # a task that may still complete, or still be retried
    (
        TaskStatus.DISPATCHED,
        TaskStatus.RUNNING,
        TaskStatus.FAILED,
        TaskStatus.TIMED_OUT,
        TaskStatus.RETRY_WAIT,
    )
)


def _branch(
    pipeline: Pipeline, state: RunState, phase: Phase, now: float, evaluator: Evaluator
) -> list[Decision]:
    assert state.current is not None
    decisions: list[Decision] = []
    context = expression_context(state, pipeline)
    target, chosen, condition = None, None, None
    for number, rule in enumerate(phase.next, start=1):
        if rule.if_ is not None:
            try:
                holds = evaluator(rule.if_, context)
            except ExpressionError as exc:
                reason = f"phase {phase.id!r}, next rule {number}: {exc}"
                return [
                    Decision(RuleName.BRANCH_ERROR, ev.RunFailed(at=now, reason=reason), reason)
                ]
            if not holds:
                continue
        visits = state.visits.get(rule.goto, 0)
        if rule.max_visits is not None and visits >= rule.max_visits:
            message = (
                f"phase {phase.id!r}: rule {number} ({rule.if_ or 'always'}) would go to "
                f"{rule.goto!r} again, but it already ran {visits} time(s) (max_visits "
                f"{rule.max_visits}); continuing without it"
            )
            decisions.append(
                Decision(RuleName.LOOP_BOUND, ev.Warned(at=now, message=message), message)
            )
            continue
        target, chosen, condition = rule.goto, number, rule.if_
        break
    if target is None:
        target = pipeline.phases[pipeline.phase_index(phase.id) + 1].id
    why = f"rule {chosen} ({condition or 'always'})" if chosen else "no rule applied: next in order"
    decisions.append(
        Decision(
            RuleName.BRANCH,
            ev.BranchTaken(
                at=now,
                phase=phase.id,
                visit=state.current.visit,
                goto=target,
                rule=chosen,
                condition=condition,
            ),
            why,
        )
    )
    next_phase = pipeline.phase(target)
    visit = state.visits.get(target, 0) + 1
    items, problem = _fan_out_items(next_phase, state)
    if problem is not None:
        return [
            *decisions,
            Decision(RuleName.BRANCH_ERROR, ev.RunFailed(at=now, reason=problem), problem),
        ]
    decisions.append(
        _start_phase(
            next_phase, visit, items, now, RuleName.BRANCH, f"entering {target!r} (visit {visit})"
        )
    )
    return decisions


def expression_context(state: RunState, pipeline: Pipeline | None = None) -> Context:
    """What conditions may read: topic, inputs, visit counts, the budget spent and left, the
    signals received, and each role's extracted values. Each is looked up when a condition
    reads it (`interlock.core.context`), so a branch costs what it reads, not the run's size.
    """

    def visits() -> dict[str, int]:
        if pipeline is None:
            return dict(state.visits)
        # A phase that has not run yet counts 0 visits, so `visits.fix < 2` works before it ran.
        return dict.fromkeys(pipeline.phase_ids, 0) | state.visits

    return Context(
        state.values,
        topic=lambda: state.topic,
        inputs=lambda: state.inputs,
        visits=visits,
        roles=lambda: state.values,
        feedback=lambda: state.feedback,
        budget=lambda: budget_values(state, pipeline),
        signals=lambda: signal_values(pipeline, state),
        failed_items=lambda: failed_item_values(state, pipeline),
    )


def failed_item_values(state: RunState, pipeline: Pipeline | None = None) -> dict[str, Any]:
    """`failed_items.PHASE` for conditions: the items of the phase's latest visit that failed
    for good within its `tolerate`, in item order, each `{index, item, task, error}` (an empty
    list for a fan-out phase none of whose items failed, or that has not run)."""
    values: dict[str, Any] = {}
    if pipeline is not None:
        values = {p.id: [] for p in pipeline.phases if p.for_each is not None}
    for phase, (_, failed) in state.failed_items.items():
        values[phase] = [dict(failed[i]) for i in sorted(failed)]
    return values


def budget_values(state: RunState, pipeline: Pipeline | None = None) -> dict[str, Any]:
    """`budget.*` for conditions: what the run spent and has left, from recorded usage only.

    The amounts are those folded from the history, so a replay reads the same values. USD is
    rounded to a millionth of a dollar so that `explain` shows 0.004, not the float sum's
    0.0040000000000000001. What is left never goes below 0 (an approved budget pause lets a
    run spend past it); it is null when the pipeline sets no such limit.
    """
    budget = pipeline.budget if pipeline is not None else None
    spent_usd = round(state.cost_usd, 6)
    limit_usd = budget.max_cost_usd if budget is not None else None
    limit_tokens = budget.max_tokens if budget is not None else None
    return {
        "spent_usd": spent_usd,
        "spent_tokens": state.tokens,
        "remaining_usd": None if limit_usd is None else round(max(0.0, limit_usd - spent_usd), 6),
        "remaining_tokens": None if limit_tokens is None else max(0, limit_tokens - state.tokens),
    }


def _fan_out_items(phase: Phase, state: RunState) -> tuple[list[Any] | None, str | None]:
    if phase.for_each is None:
        return None, None
    role, _, name = phase.for_each.items.rpartition(".")
    items = state.values.get(role, {}).get(name)
    if not isinstance(items, list):
        return None, f"phase {phase.id!r}: for_each {phase.for_each.items!r} is not a list"
    if len(items) > phase.for_each.max_items:
        return None, (
            f"phase {phase.id!r}: for_each {phase.for_each.items!r} has {len(items)} "
            f"items, more than max_items {phase.for_each.max_items}"
        )
    return list(items), None


def _start_phase(
    phase: Phase, visit: int, items: list[Any] | None, now: float, rule: RuleName, why: str
) -> Decision:
    return Decision(rule, ev.PhaseStarted(at=now, phase=phase.id, visit=visit, items=items), why)


# The rules `decide` tries before waits and dispatches, in order. The budget before a
# child's pause: a parent over budget by its child's spend stops (or pauses for the budget)
# as it would for its own.
_RULES: tuple[Callable[[Pipeline, RunState, float], list[Decision]], ...] = (
    _timeouts,
    _failures,
    _budget,
    _children,
    _tool_calls,
    _retries_due,
    _rejected,
)
