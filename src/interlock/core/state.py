"""A run's state, derived by folding its events.

`apply` is the only place state changes, and it only ever reads one event: the same history
always folds to the same state. The orchestrator keeps a folded state in memory and applies
new events as it records them, so a tick never re-reads the whole history.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from interlock.core import events as ev


class RunStatus(StrEnum):
    """Where a run stands; persisted as text."""

    RUNNING = "running"  # the engine has work to do or is waiting on tasks
    PAUSED = "paused"  # waiting for a person's approval
    DELIVERED = "delivered"  # the final output was delivered (archived later)
    FAILED = "failed"  # a task ran out of attempts, or a rule could not be applied
    CANCELLED = "cancelled"  # a person stopped it

    @property
    def ended(self) -> bool:
        """True once nothing more will happen to the run."""
        return self in ENDED


class TaskStatus(StrEnum):
    """Where one task stands; persisted as text."""

    DISPATCHED = "dispatched"  # recorded; a worker may not have picked it up yet
    RUNNING = "running"  # a worker reported it started
    COMPLETED = "completed"  # output committed; never runs again
    FAILED = "failed"  # this attempt failed; a retry may be scheduled
    TIMED_OUT = "timed_out"  # this attempt ran past its limit; a retry may be scheduled
    RETRY_WAIT = "retry_wait"  # the next attempt is scheduled for `not_before`
    ITEM_FAILED = "item_failed"  # failed for good; its fan-out tolerates it (`ItemFailed`)
    ABANDONED = "abandoned"  # the run ended while it was in flight
    AWAITING = "awaiting"  # its tool loop stopped at a call that waits for a person (`approve`)

    @property
    def in_flight(self) -> bool:
        """Dispatched and not yet finished."""
        return self in IN_FLIGHT


# Python 3.11 looks an enum member up through `EnumType.__getattr__`, several times slower than
# a module global (3.12 made members plain attributes). The engine compares statuses a few
# hundred times per run, so its hot paths use these names.
RUN_RUNNING = RunStatus.RUNNING
RUN_PAUSED = RunStatus.PAUSED
RUN_DELIVERED = RunStatus.DELIVERED
RUN_FAILED = RunStatus.FAILED
RUN_CANCELLED = RunStatus.CANCELLED
TASK_DISPATCHED = TaskStatus.DISPATCHED
TASK_RUNNING = TaskStatus.RUNNING
TASK_COMPLETED = TaskStatus.COMPLETED
TASK_FAILED = TaskStatus.FAILED
TASK_TIMED_OUT = TaskStatus.TIMED_OUT
TASK_RETRY_WAIT = TaskStatus.RETRY_WAIT
TASK_ABANDONED = TaskStatus.ABANDONED
TASK_ITEM_FAILED = TaskStatus.ITEM_FAILED
TASK_AWAITING = TaskStatus.AWAITING
IN_FLIGHT = frozenset((TASK_DISPATCHED, TASK_RUNNING))
ENDED = frozenset((RUN_DELIVERED, RUN_FAILED, RUN_CANCELLED))


@dataclass(slots=True)
class TaskState:
    """One task (a worker in one visit of a phase, for one item), across its attempts."""

    task_id: str
    phase: str
    role: str
    visit: int
    item: int | None
    attempt: int
    status: TaskStatus
    model: str | None
    dispatched_at: float
    started_at: float | None = None
    completed_at: float | None = None
    failed_at: float | None = None  # when its current attempt failed or timed out
    not_before: float | None = None
    worker: str = ""
    artifact: str | None = None
    sha256: str | None = None
    size: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    retryable: bool = True
    cost_usd: float = 0.0
    tokens: int = 0
    unpriced: bool = False  # one of its calls had no known price (it counted $0)
    estimated: bool = False  # a call's tokens were estimated: the server reported none
    # Attempts that re-made a completed output because an input it read was edited: they
    # count in `attempt`, but are no retries.
    reruns: int = 0
    # Attempts that ended only because a tool call waited for a person: they count in
    # `attempt` too, but are no failures and no retries.
    held: int = 0
    held_attempts: tuple[int, ...] = ()  # the attempts `held` counts
    # Tool calls a person decided, by "turn/call": {tool, approved, note}. Replaced, never
    # changed in place (`RunState.copy` shares it).
    tool_decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    fingerprint: str | None = None
    reused_from: str | None = None  # "run/task" whose output was carried over, if reused
    # For edits at a review (`core.review`): when the task was last dispatched and when its
    # output last changed by an edit or a re-run an edit caused (`RunState.events` counts;
    # 0: never), and whether the current attempt is such a re-run.
    dispatch_mark: int = 0
    # Its current attempt's model call waits in a provider batch since then (None: it does
    # not), and how long it waited in earlier ones: that time counts in no timeout.
    batch_since: float | None = None
    batch_waited: float = 0.0
    revised_mark: int = 0
    revising: bool = False
    first_mark: int = 0  # when the task was first dispatched: what dispatched later read it
    charged: set[int] = field(default_factory=set)  # attempts whose cost is recorded
    # What each charged attempt cost (its final usage): attempt -> dollars. Replaced, never
    # changed in place, like `child_spend`.
    attempt_cost: dict[int, float] = field(default_factory=dict)
    # A running child's spend so far, counted until its attempt's final usage replaces it:
    # attempt -> (cost, tokens). Replaced, never changed in place (`RunState.copy` shares it).
    child_spend: dict[int, tuple[float, int]] = field(default_factory=dict)
    order: int = 0  # place among the run's tasks by first dispatch: the order rules scan in


@dataclass(slots=True)
class PhaseVisit:
    """The phase the run is in, and how far it got."""

    phase: str
    visit: int
    items: list[Any] | None
    started_at: float
    task_ids: list[str] = field(default_factory=list)
    done: int = 0  # how many of `task_ids` are completed (kept by `apply`)
    completed: bool = False
    paused: bool = False
    approved: bool = False
    gates: set[str] = field(default_factory=set)  # waits of this visit that ended
    # Items that failed for good within the phase's `tolerate` (`ItemFailed`): item -> the
    # error of its first task that failed. Their lanes start nothing more.
    failed_items: dict[int, str] = field(default_factory=dict)
    failed_tasks: int = 0  # how many of `task_ids` are failed items (none of them runs)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A wait in progress (`core.waits`): for a signal, or for a due time."""

    phase: str
    visit: int
    gate: str  # "delay", "before" or "after"
    signal: str | None
    until: float | None  # when it ends on its own (None: only a signal ends it)
    since: float


@dataclass(frozen=True, slots=True)
class Child:
    """The child run a `pipeline` worker's attempt started, as last reported."""

    run: str
    attempt: int
    status: str  # "running", "paused" or "waiting" (its end is the task's)
    detail: str = ""
    cost_usd: float = 0.0  # what it has spent so far, as last recorded (`ChildSpent`)
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Signal:
    """A received signal no wait has taken yet."""

    name: str
    data: Any
    key: str | None
    at: float  # when it was sent (or recorded, if the sender did not say)


@dataclass(slots=True)
class RunState:
    """Everything the engine needs to decide; built only by `fold` / `apply`."""

    run_id: str = ""
    pipeline: str = ""
    definition_hash: str = ""
    topic: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    status: RunStatus = RUN_RUNNING
    archived: bool = False
    current: PhaseVisit | None = None
    visits: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, TaskState] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, tuple[int, dict[int | None, str]]] = field(default_factory=dict)
    phase_status: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    approvals: int = 0
    pause_reason: str | None = None
    budget_waived: bool = False
    slot: str | None = None  # the concurrency key's value, once the run has a slot
    slot_awaited: ev.SlotAwaited | None = None  # while it waits for one
    # Task concurrency keys (`Worker.concurrency`), by task id: the attempts that wait for a
    # slot before their dispatch, and those that hold one until the attempt ends.
    task_slot_waits: dict[str, ev.TaskSlotAwaited] = field(default_factory=dict)
    task_slots: dict[str, ev.TaskSlotTaken] = field(default_factory=dict)
    failure: str | None = None
    delivered: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    unpriced: tuple[str, ...] = ()  # model aliases called with no known price (sorted)
    estimated: bool = False  # some call's tokens (so its cost) were estimated, not reported
    events: int = 0
    rerun_of: str | None = None  # the source run whose outputs this run may reuse
    rerun_from: str | None = None  # from this phase on, nothing is reused
    no_cache: bool = False  # the cache is off for this run (--no-cache)
    rejections: int = 0  # times a person sent the run back at a review
    feedback: str = ""  # the latest rejection's text (`{{ feedback }}`, `feedback` in CEL)
    reject_to: str | None = None  # a recorded rejection's phase, until its new visit starts
    rejected_visit: tuple[str, int] | None = None  # (phase, visit) the latest rejection started
    revisions: int = 0  # edits since the last rejection (0: nothing can be stale)
    edits: list[tuple[str, str, str]] = field(default_factory=list)  # task, old sha, new sha
    waiting: Waiting | None = None  # the wait in progress, if any
    inbox: list[Signal] = field(default_factory=list)  # received, not yet taken by a wait
    signals: dict[str, Any] = field(default_factory=dict)  # taken: data (None: timed out)
    signal_keys: set[str] = field(default_factory=set)  # idempotency keys seen
    # Indexes `apply` keeps so that a rule looks only at the tasks it can concern: a phase of
    # 10,000 workers must not cost 10,000 steps per event. Task ids by status group, each in
    # the order its tasks entered the group, and two heaps of the attempts in flight: those
    # running by their start, those not started yet by their dispatch, since each has its own
    # deadline (`timeout + grace` from the start; `start_timeout` from the dispatch). Entries
    # an attempt has since left are skipped, popped once they reach the top, and swept.
    flight: dict[str, None] = field(default_factory=dict)  # dispatched or running
    failing: dict[str, None] = field(default_factory=dict)  # failed or timed out
    retrying: dict[str, None] = field(default_factory=dict)  # waiting for a retry
    awaiting: dict[str, None] = field(default_factory=dict)  # a tool call waits for a person
    # The tool calls that wait for a person's decision, by task id: the `approval` of the
    # attempt's `TaskFailed` with its `attempt` and `since`. A decided call leaves it.
    tool_waits: dict[str, dict[str, Any]] = field(default_factory=dict)
    starts: list[tuple[float, int, str]] = field(default_factory=list)  # running, by start
    queued: list[tuple[float, int, str]] = field(default_factory=list)  # not started, by dispatch
    parent_run: str | None = None  # a child run: the run whose task it works for
    parent_task: str | None = None
    children: dict[str, Child] = field(default_factory=dict)  # task id -> its latest child
    # Imported from a bundle and not trusted since: nothing of its definition runs.
    inert: bool = False
    # Fan-out items that failed for good within `tolerate`, by phase, of its latest visit:
    # phase -> (visit, item index -> {index, item, task, error}), what `failed_items` reads.
    failed_items: dict[str, tuple[int, dict[int, dict[str, Any]]]] = field(default_factory=dict)
    imported: bool = False  # its history came from a bundle (`interlock import`)
    # What the source had spent and completed when it was exported (an imported run).
    imported_spend: tuple[float, int, frozenset[str]] = (0.0, 0, frozenset())

    def in_flight(self) -> list[TaskState]:
        """Tasks dispatched and not finished, in dispatch order."""
        return sorted((self.tasks[t] for t in self.flight), key=_by_order)

    def in_group(self, group: dict[str, None]) -> list[TaskState]:
        """The tasks of one index (`flight`, `failing`, `retrying`) in dispatch order."""
        return sorted((self.tasks[t] for t in group), key=_by_order)

    def flight_since(self, started: float, dispatched: float) -> list[TaskState]:
        """In-flight tasks whose current attempt started at or before `started`, or has not
        started and was dispatched at or before `dispatched`; in dispatch order.

        Walks each heap only where entries are that early: the cost follows the answer's size.
        """
        starts, queued = self.starts, self.queued
        if (not starts or starts[0][0] > started) and (not queued or queued[0][0] > dispatched):
            return []  # the usual answer, on every decision of every run: nothing is late
        found: dict[str, TaskState] = {}
        for heap, until, valid in (
            (self.starts, started, _running_since),
            (self.queued, dispatched, _queued_since),
        ):
            stack = [0]
            while stack:
                index = stack.pop()
                if index >= len(heap) or heap[index][0] > until:
                    continue  # a heap's children are never earlier than their parent
                since, _, task_id = heap[index]
                # A fork for `check` keeps only open tasks and the current visit's: an entry
                # of a task completed earlier may name one it does not hold.
                task = self.tasks.get(task_id)
                if task is not None and valid(task, since):
                    found[task_id] = task
                stack += (2 * index + 1, 2 * index + 2)
        return sorted(found.values(), key=_by_order)

    def earliest_deadline(
        self, deadline: Callable[[TaskState], float], running: float, queued: float
    ) -> float | None:
        """The least `deadline(task)` of the tasks in flight, where no deadline is less than
        `running` after a started attempt's start, nor `queued` after the dispatch of one not
        started (None: nothing in flight).

        Walks each heap only while an attempt found there could still be due first: with one
        timeout for all workers, little more than its earliest attempt.
        """
        best = math.inf
        for heap, shortest, valid in (
            (self.starts, running, _running_since),
            (self.queued, queued, _queued_since),
        ):
            stack = [0]
            while stack:
                index = stack.pop()
                if index >= len(heap) or heap[index][0] + shortest >= best:
                    continue
                since, _, task_id = heap[index]
                task = self.tasks.get(task_id)  # see `flight_since`
                if task is not None and valid(task, since):
                    best = min(best, deadline(task))
                stack += (2 * index + 1, 2 * index + 2)
        return None if best == math.inf else best

    def copy(self) -> RunState:
        """An independent copy (for exploring alternatives in `check` and in tests)."""
        clone = dataclasses.replace(self)
        clone.tasks = {k: dataclasses.replace(v) for k, v in self.tasks.items()}
        if self.current is not None:
            clone.current = dataclasses.replace(
                self.current,
                task_ids=list(self.current.task_ids),
                gates=set(self.current.gates),
                failed_items=dict(self.current.failed_items),
            )
        clone.visits = dict(self.visits)
        clone.values = dict(self.values)
        clone.outputs = {k: (v[0], dict(v[1])) for k, v in self.outputs.items()}
        clone.phase_status = dict(self.phase_status)
        clone.warnings = list(self.warnings)
        clone.edits = list(self.edits)
        clone.inbox = list(self.inbox)
        clone.signals = dict(self.signals)
        clone.signal_keys = set(self.signal_keys)
        clone.flight, clone.failing = dict(self.flight), dict(self.failing)
        clone.retrying, clone.starts = dict(self.retrying), list(self.starts)
        clone.awaiting, clone.tool_waits = dict(self.awaiting), dict(self.tool_waits)
        clone.queued = list(self.queued)
        clone.children = dict(self.children)
        clone.failed_items = {k: (v[0], dict(v[1])) for k, v in self.failed_items.items()}
        clone.task_slot_waits, clone.task_slots = dict(self.task_slot_waits), dict(self.task_slots)
        return clone

    def held_by_child(self, status: str) -> Child | None:
        """A child of a task in flight that is `status` ("paused", "waiting"), if any."""
        for task_id, child in self.children.items():
            task = self.tasks.get(task_id)
            if (
                child.status == status
                and task is not None
                and task.attempt == child.attempt
                and task.status in IN_FLIGHT
            ):
                return child
        return None


def _by_order(task: TaskState) -> int:
    return task.order


def _running_since(task: TaskState, since: float) -> bool:
    """Whether a `starts` entry still stands for the task's current attempt (one whose call
    waits in a provider batch has none: no timeout runs meanwhile)."""
    return task.status is TASK_RUNNING and task.batch_since is None and clock_start(task) == since


def clock_start(task: TaskState) -> float:
    """When the running attempt's timeout clock started: its start, later by the time its
    model call waited in provider batches (`TaskBatchWaited`)."""
    assert task.started_at is not None
    return task.started_at + task.batch_waited


def _queued_since(task: TaskState, since: float) -> bool:
    """Whether a `queued` entry still stands for the task's current attempt."""
    return task.status is TASK_DISPATCHED and task.dispatched_at == since


def _group(state: RunState, status: TaskStatus) -> dict[str, None] | None:
    if status is TASK_DISPATCHED or status is TASK_RUNNING:
        return state.flight
    if status is TASK_FAILED or status is TASK_TIMED_OUT:
        return state.failing
    if status is TASK_RETRY_WAIT:
        return state.retrying
    if status is TASK_AWAITING:
        return state.awaiting
    return None


def _set_status(state: RunState, task: TaskState, status: TaskStatus) -> None:
    """Change a task's status and the indexes that follow it."""
    old = task.status
    before, after = _group(state, old), _group(state, status)
    if before is not after:  # a start stays where its dispatch put it in `flight`
        if before is not None:
            before.pop(task.task_id, None)
        if after is not None:
            after[task.task_id] = None
    current = state.current
    if (
        current is not None
        and (old is TASK_COMPLETED) is not (status is TASK_COMPLETED)
        and task.phase == current.phase
        and task.visit == current.visit
    ):
        current.done += 1 if status is TASK_COMPLETED else -1
    task.status = status
    if after is not state.flight and before is state.flight:
        _prune(state)  # its heap entry may be at the top now


def _track_start(state: RunState, task: TaskState) -> None:
    """Index the task's current attempt by its start (or, not started yet, its dispatch)."""
    if task.started_at is None:
        heapq.heappush(state.queued, (task.dispatched_at, task.order, task.task_id))
    else:
        heapq.heappush(state.starts, (clock_start(task), task.order, task.task_id))
    _prune(state)


def _prune(state: RunState) -> None:
    """Pop the entries at the top of each heap that no longer stand, and sweep a heap that
    is mostly such entries.

    Attempts mostly start in the order they were dispatched and end in the order they
    started, so what has left a heap is usually at its top: popping it there keeps both the
    walks of `flight_since` and `earliest_deadline` and the sweeps rare, whatever the width.
    """
    tasks, limit = state.tasks, 2 * len(state.flight) + 64
    for heap, valid in ((state.starts, _running_since), (state.queued, _queued_since)):
        while heap:
            since, _, task_id = heap[0]
            task = tasks.get(task_id)
            if task is not None and valid(task, since):
                break
            heapq.heappop(heap)
        if len(heap) > limit:
            heap[:] = [entry for entry in heap if _stands(tasks, entry, valid)]
            heapq.heapify(heap)


def _stands(
    tasks: dict[str, TaskState],
    entry: tuple[float, int, str],
    valid: Callable[[TaskState, float], bool],
) -> bool:
    task = tasks.get(entry[2])
    return task is not None and valid(task, entry[0])


def _drop_lane_slots(state: RunState, visit: int, item: int) -> None:
    """A lane whose item failed for good starts nothing more (`decide`): its tasks that
    wait for a task slot, or took one, without having been dispatched stop waiting and give
    the slot back, so that no other attempt waits behind a slot nobody will use."""
    lane = f"@{visit}.{item}"
    for held in (state.task_slot_waits, state.task_slots):
        for task_id in [t for t in held if t.endswith(lane) and t not in state.tasks]:
            del held[task_id]


def task_id_for(role: str, visit: int, item: int | None) -> str:
    """Stable id of a task: `role@visit`, or `role@visit.item` in a fan-out."""
    return f"{role}@{visit}" if item is None else f"{role}@{visit}.{item}"


def artifact_name(output: str, visit: int, item: int | None) -> str:
    """The file a task's output is committed to; each visit and item keeps its own file."""
    stem, dot, ext = output.rpartition(".")
    if not dot:
        stem, ext = output, ""
    suffix = ("" if item is None else f".{item}") + ("" if visit == 1 else f".v{visit}")
    return f"{stem}{suffix}{dot}{ext}"


def fold(history: list[ev.Event]) -> RunState:
    """The state a history leads to."""
    state = RunState()
    for event in history:
        apply(state, event)
    return state


def apply(state: RunState, event: ev.Event) -> None:
    """Fold one event into `state` (the only mutation of run state anywhere)."""
    state.events += 1
    state.updated_at = event.at
    # One look-up by the event's type instead of a chain of isinstance tests, which cost a
    # run's fold about eight tests per event (a RunCreated 30).
    fold_in = _FOLDS.get(type(event)) or _fold_of(type(event))
    fold_in(state, event)


def _dispatched(state: RunState, event: ev.TaskDispatched) -> None:
    task = state.tasks.get(event.task_id)
    if task is None:
        task = TaskState(
            task_id=event.task_id,
            phase=event.phase,
            role=event.role,
            visit=event.visit,
            item=event.item,
            attempt=event.attempt,
            status=TASK_DISPATCHED,
            model=event.model,
            dispatched_at=event.at,
            dispatch_mark=state.events,
            first_mark=state.events,
            order=len(state.tasks),
        )
        state.tasks[event.task_id] = task
        state.flight[event.task_id] = None
        if state.current is not None and state.current.phase == event.phase:
            state.current.task_ids.append(event.task_id)
    else:
        if task.status is TASK_COMPLETED:
            task.revising = True  # a completed task dispatched again: an edit's re-run
            task.reruns += 1
            current = state.current
            if current is not None and (current.phase, current.visit) == (
                task.phase,
                task.visit,
            ):
                # What was approved is being made again (an input it read was edited):
                # a phase with pause_after waits for a person once more when it is done.
                current.approved = False
        state.flight.pop(event.task_id, None)  # dispatched again: last in dispatch order
        _set_status(state, task, TASK_DISPATCHED)
        task.attempt, task.model = event.attempt, event.model
        task.dispatched_at, task.started_at, task.not_before = event.at, None, None
        task.batch_since, task.batch_waited = None, 0.0
        task.dispatch_mark = state.events
    _track_start(state, task)


def _usage_recorded(state: RunState, event: ev.UsageRecorded) -> None:
    _charge(state, state.tasks[event.task_id], event.attempt, event.usage)


def _retry_scheduled(state: RunState, event: ev.RetryScheduled) -> None:
    task = state.tasks[event.task_id]
    if task.status is TASK_AWAITING:
        task.held += 1  # the loop goes on after a decided call: no retry
        task.held_attempts = (*task.held_attempts, task.attempt)
    _set_status(state, task, TASK_RETRY_WAIT)
    task.not_before, task.attempt, task.model = event.not_before, event.attempt, event.model


def _phase_started(state: RunState, event: ev.PhaseStarted) -> None:
    state.visits[event.phase] = event.visit
    if state.reject_to == event.phase:
        state.rejected_visit = (event.phase, event.visit)
    state.reject_to = None
    state.waiting = None  # a wait belongs to one visit (a rejection may leave one behind)
    state.current = PhaseVisit(
        phase=event.phase, visit=event.visit, items=event.items, started_at=event.at
    )
    state.phase_status[event.phase] = "running"
    state.failed_items.pop(event.phase, None)  # the latest visit's failed items only


def _item_failed(state: RunState, event: ev.ItemFailed) -> None:
    task = state.tasks[event.task_id]
    _set_status(state, task, TASK_ITEM_FAILED)
    _drop_lane_slots(state, event.visit, event.item)
    current = state.current
    if current is not None and (current.phase, current.visit) == (event.phase, event.visit):
        current.failed_items.setdefault(event.item, event.error)
        current.failed_tasks += 1
        items = current.items or []
        value = items[event.item] if 0 <= event.item < len(items) else None
        _, by_item = state.failed_items.setdefault(event.phase, (event.visit, {}))
        by_item.setdefault(
            event.item,
            {"index": event.item, "item": value, "task": event.task_id, "error": event.error},
        )


def _phase_completed(state: RunState, event: ev.PhaseCompleted) -> None:
    if state.current is not None:
        state.current.completed = True
    state.phase_status[event.phase] = "completed"


def _paused(state: RunState, event: ev.Paused) -> None:
    state.status, state.pause_reason = RUN_PAUSED, event.reason
    if state.current is not None and event.reason == "pause_after":
        state.current.paused = True
    if event.reason == "budget":
        state.budget_waived = True  # approving a budget pause lets the run spend on


def _approved(state: RunState, event: ev.Approved) -> None:
    state.approvals += 1
    state.status = RUN_RUNNING
    if state.current is not None and state.pause_reason == "pause_after":
        state.current.approved = True
    state.pause_reason = None


def _slot_taken(state: RunState, event: ev.SlotTaken) -> None:
    state.slot, state.slot_awaited = event.key, None


def _slot_awaited(state: RunState, event: ev.SlotAwaited) -> None:
    state.slot_awaited = event


def _task_slot_awaited(state: RunState, event: ev.TaskSlotAwaited) -> None:
    state.task_slot_waits[event.task_id] = event


def _task_slot_taken(state: RunState, event: ev.TaskSlotTaken) -> None:
    state.task_slot_waits.pop(event.task_id, None)
    state.task_slots[event.task_id] = event


def _child_updated(state: RunState, event: ev.ChildUpdated) -> None:
    owner = state.tasks.get(event.task_id)
    spent = (0.0, 0) if owner is None else owner.child_spend.get(event.attempt, (0.0, 0))
    state.children[event.task_id] = Child(
        run=event.child_run,
        attempt=event.attempt,
        status=event.status,
        detail=event.detail,
        cost_usd=spent[0],
        tokens=spent[1],
    )


def _resumed(state: RunState, event: ev.Resumed) -> None:
    state.status, state.pause_reason = RUN_RUNNING, None


def _nothing(state: RunState, event: ev.Event) -> None:
    """An event the state does not keep (a BranchTaken: the PhaseStarted that follows
    carries the new position; a note)."""


def _warned(state: RunState, event: ev.Warned) -> None:
    state.warnings.append(event.message)


def _run_created(state: RunState, event: ev.RunCreated) -> None:
    state.run_id, state.pipeline, state.topic = event.run_id, event.pipeline, event.topic
    state.definition_hash, state.inputs = event.definition_hash, dict(event.inputs)
    state.created_at = event.at
    state.rerun_of, state.rerun_from = event.rerun_of, event.rerun_from
    state.no_cache = event.no_cache
    state.parent_run, state.parent_task = event.parent_run, event.parent_task


def _delivered(state: RunState, event: ev.Delivered) -> None:
    state.status, state.delivered = RUN_DELIVERED, event.artifact
    state.task_slot_waits.clear()
    state.task_slots.clear()


def _archived(state: RunState, event: ev.Archived) -> None:
    state.archived = True


def _run_imported(state: RunState, event: ev.RunImported) -> None:
    state.inert, state.imported = not event.trusted, True
    done = frozenset(t for t, task in state.tasks.items() if task.status is TaskStatus.COMPLETED)
    state.imported_spend = (state.cost_usd, state.tokens, done)


def _bundle_trusted(state: RunState, event: ev.BundleTrusted) -> None:
    state.inert = False


def _run_ended(state: RunState, event: ev.RunFailed | ev.RunCancelled) -> None:
    failed = isinstance(event, ev.RunFailed)
    state.status = RUN_FAILED if failed else RUN_CANCELLED
    state.failure = event.reason if failed else (event.reason or "cancelled")
    for task_id in [*state.flight, *state.retrying, *state.awaiting]:
        _set_status(state, state.tasks[task_id], TASK_ABANDONED)
    state.tool_waits.clear()
    state.waiting = None
    state.task_slot_waits.clear()  # an ended run holds no slot and waits for none
    state.task_slots.clear()
    if state.current is not None and not state.current.completed:
        state.phase_status[state.current.phase] = "failed" if failed else "cancelled"


def _fold_of(cls: type) -> Callable[[RunState, Any], None]:
    """How an event type not in `_FOLDS` itself is folded: as its nearest base that is."""
    for base in cls.__mro__[1:]:
        if base in _FOLDS:
            return _FOLDS[base]
    return _nothing


def _apply_wait(state: RunState, event: ev.WaitStarted | ev.SignalReceived | ev.WaitEnded) -> None:
    """A wait starts or ends, or a signal arrives (`interlock.core.waits`)."""
    if isinstance(event, ev.SignalReceived):
        if event.key is not None:
            if event.key in state.signal_keys:
                return  # a second delivery of the same signal: it was kept once already
            state.signal_keys.add(event.key)
        sent = event.at if event.sent_at is None else event.sent_at
        state.inbox.append(Signal(name=event.name, data=event.data, key=event.key, at=sent))
    elif isinstance(event, ev.WaitStarted):
        state.waiting = Waiting(
            phase=event.phase,
            visit=event.visit,
            gate=event.gate,
            signal=event.signal,
            until=event.until,
            since=event.at,
        )
    else:
        state.waiting = None
        if state.current is not None:
            state.current.gates.add(event.gate)
        if event.signal is None:
            return
        state.signals[event.signal] = event.data if event.outcome == "signal" else None
        if event.outcome == "signal":
            taken = next(
                (
                    i
                    for i, s in enumerate(state.inbox)
                    if s.name == event.signal and s.key == event.key
                ),
                None,
            )
            if taken is not None:
                del state.inbox[taken]


def listed_status(state: RunState) -> str:
    """The status runs are listed with: `waiting` for a running run held by a wait, by its
    concurrency key, or by a child run that waits."""
    if state.status is RUN_RUNNING and (
        state.waiting is not None
        or state.slot_awaited is not None
        or (state.task_slot_waits and not state.flight)
        or state.held_by_child("waiting") is not None
    ):
        return "waiting"
    return str(state.status)  # its value: `.value` of an enum is a Python call in 3.11


def batch_parked(state: RunState) -> bool:
    """Whether the run only waits for provider-batch answers: it is running (no wait, slot
    or child holds it), has tasks in flight, every one of them waits in a provider batch
    (`task_batch_waited`), and none failed, waits for a retry or for a person. The engine
    dispatches all it can at once, so such a run has nothing else to do until an answer
    comes: a batch of rows lets it wait without counting it against `--concurrency`."""
    if not state.flight or state.failing or state.retrying or state.awaiting:
        return False
    tasks = state.tasks
    # Stops at the first task that does not wait: a run without provider batches costs one
    # step per append, a wide phase more only while nearly all of it waits.
    if not all(tasks[t].batch_since is not None for t in state.flight):
        return False
    return listed_status(state) == "running"


def _apply_task_result(state: RunState, event: ev.Event) -> None:
    task = state.tasks[event.task_id]  # type: ignore[attr-defined]
    if isinstance(event, ev.TaskStarted):
        _set_status(state, task, TASK_RUNNING)
        task.started_at, task.worker = event.at, event.worker
        task.batch_since, task.batch_waited = None, 0.0  # a start again: its clock anew
        _track_start(state, task)
        return
    usage = getattr(event, "usage", None)
    if usage:
        _charge(state, task, event.attempt, usage)  # type: ignore[attr-defined]
    held = state.task_slots.get(task.task_id)
    if held is not None and held.attempt == event.attempt:  # type: ignore[attr-defined]
        del state.task_slots[task.task_id]  # the attempt ended: its slot is free again
    if isinstance(event, ev.TaskCompleted):
        _set_status(state, task, TASK_COMPLETED)
        task.completed_at = event.at
        task.artifact, task.sha256, task.size = event.artifact, event.sha256, event.size
        task.values, task.error = dict(event.values), None
        task.fingerprint = event.fingerprint
        if task.revising:
            task.revising, task.revised_mark = False, state.events
        _record_output(state, task, event.artifact)
    elif isinstance(event, ev.TaskFailed) and event.approval is not None:
        _set_status(state, task, TASK_AWAITING)
        task.error = f"waits for a decision on tool call {event.approval.get('tool', '?')!r}"
        state.tool_waits[task.task_id] = {
            **event.approval,
            "attempt": event.attempt,
            "since": event.at,
        }
    elif isinstance(event, ev.TaskFailed):
        _set_status(state, task, TASK_FAILED)
        task.failed_at = event.at
        task.error, task.retryable = event.error, event.retryable
        # The provider's Retry-After: the next attempt of the same model waits for it.
        wait = event.retry_after
        task.not_before = None if wait is None else event.at + wait
    elif isinstance(event, ev.TaskTimedOut):
        _set_status(state, task, TASK_TIMED_OUT)
        task.failed_at = event.at
        task.retryable = True
        task.error = event.detail or "timed out"


def _batch_waited(state: RunState, event: ev.TaskBatchWaited) -> None:
    """The attempt's call went into a provider batch (its timeout clock stops: the entry in
    `starts` no longer stands), or came back (the clock goes on from where it stopped)."""
    task = state.tasks[event.task_id]
    if event.waiting:
        task.batch_since = event.at
        _prune(state)
    elif task.batch_since is not None:
        task.batch_waited += max(0.0, event.at - task.batch_since)
        task.batch_since = None
        _track_start(state, task)


def _record_output(state: RunState, task: TaskState, artifact: str) -> None:
    state.values[task.role] = task.values
    latest = state.outputs.get(task.role)
    if latest is None or latest[0] != task.visit:
        latest = (task.visit, {})  # reads see the latest visit only
        state.outputs[task.role] = latest
    latest[1][task.item] = artifact


def _apply_reuse(state: RunState, event: ev.TaskReused) -> None:
    """A reused output completes its task like a result would, at no cost."""
    task = state.tasks[event.task_id]
    _set_status(state, task, TASK_COMPLETED)
    task.completed_at = event.at
    task.artifact, task.sha256, task.size = event.artifact, event.sha256, event.size
    task.values, task.error = dict(event.values), None
    task.fingerprint = event.fingerprint
    task.reused_from = f"{event.source_run}/{event.source_task}"
    state.task_slots.pop(task.task_id, None)  # not run after all: its slot is free again
    _record_output(state, task, event.artifact)


def _apply_review(state: RunState, event: ev.Rejected | ev.OutputEdited) -> None:
    """A person's edit or rejection at a review (see `interlock.core.review`)."""
    if isinstance(event, ev.OutputEdited):
        task = state.tasks[event.task_id]
        task.sha256, task.size, task.values = event.sha256, event.size, dict(event.values)
        task.revised_mark = state.events
        _record_output(state, task, event.artifact)
        state.edits.append((event.task_id, event.old_sha256, event.sha256))
        state.revisions += 1
        return
    state.status, state.pause_reason = RUN_RUNNING, None
    state.rejections += 1
    state.feedback, state.reject_to = event.feedback, event.to
    state.revisions = 0  # the phases visited again read the edited outputs anyway
    for task in state.tasks.values():
        task.revised_mark = 0
    for task_id in [*state.retrying, *state.awaiting]:
        _set_status(state, state.tasks[task_id], TASK_ABANDONED)  # a retry left behind
    state.tool_waits.clear()


def _tool_call_decided(state: RunState, event: ev.ToolCallDecided) -> None:
    """A person decided a waiting tool call: it is kept with its task, for the attempts
    that continue the loop; once no call waits, a run paused for one goes on."""
    task = state.tasks.get(event.task_id)
    if task is None:
        return
    key = f"{event.turn}/{event.call}"
    decision = {"tool": event.tool, "approved": event.approved, "note": event.note}
    task.tool_decisions = {**task.tool_decisions, key: decision}
    waiting = state.tool_waits.get(event.task_id)
    if waiting is not None and (waiting.get("turn"), waiting.get("call")) == (
        event.turn,
        event.call,
    ):
        del state.tool_waits[event.task_id]
    if state.status is RUN_PAUSED and state.pause_reason == "tool" and not state.tool_waits:
        state.status, state.pause_reason = RUN_RUNNING, None


def _charge(state: RunState, task: TaskState, attempt: int, usage: dict[str, Any]) -> None:
    """Add what one attempt's call cost to the task and the run (budgets count it).

    For a child run's attempt this is its final spend: what was counted while it ran is
    taken back first, so that the spend counts once.
    """
    cost = float(usage.get("cost_usd", 0.0))
    tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
    if usage.get("estimated"):
        task.estimated = state.estimated = True
    if usage.get("unpriced"):
        task.unpriced = True
        # A `call:` worker's calls of several aliases name those without a price.
        named = usage.get("unpriced_aliases")
        aliases = (
            [str(a) for a in named]
            if isinstance(named, list) and named
            else [str(usage.get("alias") or usage.get("model") or "?")]
        )
        if any(alias not in state.unpriced for alias in aliases):
            state.unpriced = tuple(sorted({*state.unpriced, *aliases}))
    counted = task.child_spend.get(attempt)
    if counted is not None:
        task.child_spend = {a: s for a, s in task.child_spend.items() if a != attempt}
        cost, tokens = cost - counted[0], tokens - counted[1]
    task.attempt_cost = {**task.attempt_cost, attempt: float(usage.get("cost_usd", 0.0))}
    _add(state, task, cost, tokens)
    task.charged.add(attempt)


def _add(state: RunState, task: TaskState, cost: float, tokens: int) -> None:
    task.cost_usd += cost
    task.tokens += tokens
    state.cost_usd += cost
    state.tokens += tokens


def _child_spent(state: RunState, event: ev.ChildSpent) -> None:
    """A running child's spend so far: the difference to what was counted is added now."""
    task = state.tasks[event.task_id]
    if event.attempt in task.charged:
        return  # its final usage is recorded already and counts instead
    before = task.child_spend.get(event.attempt, (0.0, 0))
    _add(state, task, event.cost_usd - before[0], event.tokens - before[1])
    task.child_spend = {**task.child_spend, event.attempt: (event.cost_usd, event.tokens)}
    child = state.children.get(event.task_id)
    if child is not None and child.run == event.child_run:
        state.children[event.task_id] = dataclasses.replace(
            child, cost_usd=event.cost_usd, tokens=event.tokens
        )


# How each event type is folded (`apply`); a type left out changes nothing but the count.
_FOLDS: dict[type, Callable[[RunState, Any], None]] = {
    ev.TaskDispatched: _dispatched,
    ev.TaskStarted: _apply_task_result,
    ev.TaskCompleted: _apply_task_result,
    ev.TaskFailed: _apply_task_result,
    ev.TaskTimedOut: _apply_task_result,
    ev.TaskReused: _apply_reuse,
    ev.UsageRecorded: _usage_recorded,
    ev.TaskBatchWaited: _batch_waited,
    ev.RetryScheduled: _retry_scheduled,
    ev.PhaseStarted: _phase_started,
    ev.ItemFailed: _item_failed,
    ev.PhaseCompleted: _phase_completed,
    ev.Paused: _paused,
    ev.Approved: _approved,
    ev.Rejected: _apply_review,
    ev.OutputEdited: _apply_review,
    ev.ToolCallDecided: _tool_call_decided,
    ev.WaitStarted: _apply_wait,
    ev.SignalReceived: _apply_wait,
    ev.WaitEnded: _apply_wait,
    ev.SlotTaken: _slot_taken,
    ev.SlotAwaited: _slot_awaited,
    ev.TaskSlotAwaited: _task_slot_awaited,
    ev.TaskSlotTaken: _task_slot_taken,
    ev.ChildUpdated: _child_updated,
    ev.ChildSpent: _child_spent,
    ev.Resumed: _resumed,
    ev.BranchTaken: _nothing,
    ev.Warned: _warned,
    ev.RunCreated: _run_created,
    ev.Delivered: _delivered,
    ev.Archived: _archived,
    ev.RunImported: _run_imported,
    ev.BundleTrusted: _bundle_trusted,
    ev.RunFailed: _run_ended,
    ev.RunCancelled: _run_ended,
}
