"""An independent statement of the engine's rules, judged from the history alone.

The simulator must not share code with what it checks: a rule stated once, in the engine, and
used by the checker too, is wrong in both places at once and never noticed. `Oracle` folds the
stored events into a model of its own (tasks, attempts, revisions of every output, the phase
the run is in) and refuses what the rules forbid; it imports nothing of the engine but the
event types and the parsed workflow model (`tests/reliability/test_oracle.py` pins that).

Rules restated here, each as briefly as it can be said:
- attempts: a failed attempt is retried with the next one (a failure not worth retrying jumps
  to the next fallback model's first attempt); no retry past `max_attempts`, edit or not. A
  dispatch past `max_attempts` is only ever the re-run of a completed task that read an edit.
- giving up: once a task has no attempt left, nothing is dispatched or retried, and the run
  fails only after every attempt that had started by then has ended.
- loops: a bounded `next` rule is taken only while its target ran fewer than `max_visits`
  times.
- tolerance: a fan-out item is recorded as failed only once its task has no attempt left, in
  the visit under way of a phase with `tolerate`, and only while the visit's failed items
  (each item once) stay within it: `N` items, or `P%` of the visit's items rounded down. A
  run whose task has no attempt left and whose fan-out's tolerance does not cover it fails,
  saying how many of how many items failed; a visit completes with every task of its other
  lanes completed, and a run that delivers has no visit past its tolerance.
- edits: an output changes by its task's completion, or by an edit at a review; an edit since
  the last rejection makes every task that read the old version stale until it is dispatched
  again (transitively). A delivered run holds no stale output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from interlock.core import events as ev
from interlock.core.workflow import Pipeline, Worker

OPTIONAL_READ = "?"  # a `reads` entry that may be missing ends with it


@dataclass
class OracleTask:
    """One task as the history tells it."""

    task_id: str
    role: str
    phase: str
    visit: int
    item: int | None
    order: int
    attempt: int = 1
    # dispatched, started, completed, failed, retry_wait, abandoned, item_failed (tolerated)
    status: str = "dispatched"
    retryable: bool = True
    dispatched_at: float = 0.0
    started_at: float | None = None
    failed_at: float | None = None
    dispatch_seq: int = 0
    first_seq: int = 0  # seq of its first dispatch: only tasks dispatched later can read it
    artifact: str | None = None
    sha256: str | None = None
    edited: bool = False  # its latest revision is a person's edit
    edit_mark: int = 0  # seq of its last change by an edit or an edit's re-run (0: none)
    revising: bool = False  # re-dispatched after completing: an edit's re-run
    reused: bool = False


def next_attempt(worker: Worker, task: OracleTask) -> int:
    """The attempt that follows a failed one: the next, or the next model's first."""
    per_model = worker.retries + 1
    if task.retryable:
        return task.attempt + 1
    return ((task.attempt - 1) // per_model + 1) * per_model + 1


def allowed_failures(tolerance: int | str | None, count: int) -> int:
    """How many of `count` items a `tolerate` lets fail: a count, or a percentage of them
    rounded down (exactly, as a fraction)."""
    if tolerance is None:
        return 0
    if isinstance(tolerance, int):
        return tolerance
    return int(Fraction(tolerance.rstrip("%")) * count // 100)


def read_roles(pipeline: Pipeline, worker: Worker) -> list[str]:
    """The roles whose outputs `worker` reads (its `reads` entries, by output name)."""
    writers = {w.output_name: w.role for p in pipeline.phases for w in p.workers}
    roles = []
    for entry in worker.reads:
        name = entry[: -len(OPTIONAL_READ)] if entry.endswith(OPTIONAL_READ) else entry
        if name in writers:
            roles.append(writers[name])
    return roles


@dataclass
class Oracle:
    """Feeds on stored events in order; `feed` returns what one broke."""

    pipeline: Pipeline
    tasks: dict[str, OracleTask] = field(default_factory=dict)
    outputs: dict[str, tuple[int, dict[int | None, str]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # artifact -> sha256 it holds now
    visits: dict[str, int] = field(default_factory=dict)
    status: str = "running"  # running, paused, delivered, failed, cancelled
    archived: bool = False
    phase: str | None = None
    edits: int = 0  # edits since the last rejection (0: nothing can be stale)
    delivered: ev.Delivered | None = None
    reused: list[ev.TaskReused] = field(default_factory=list)
    dispatched: set[tuple[str, int]] = field(default_factory=set)  # (task, attempt)
    seq: int = 0
    # Fan-out visits: (phase, visit) -> how many items, and the items recorded as failed.
    items: dict[tuple[str, int], int] = field(default_factory=dict)
    failed_items: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    completed_visits: set[tuple[str, int]] = field(default_factory=set)

    def feed(self, seq: int, event: ev.Event) -> str | None:
        """Check one more event against the rules, then fold it into the model."""
        self.seq = seq
        problem = self._give_up(event) or self._check(event)
        self._fold(event)
        return problem

    # -- checks -----------------------------------------------------------------------------

    def _check(self, event: ev.Event) -> str | None:
        if isinstance(event, ev.TaskDispatched):
            limit = self.pipeline.worker(event.role).max_attempts
            task = self.tasks.get(event.task_id)
            rerun = task is not None and task.status == "completed"
            if rerun and not self.edits:
                return f"{event.task_id} dispatched again with no edit since the last rejection"
            if event.attempt > limit and not rerun:
                return f"{event.task_id} attempt {event.attempt} past max_attempts {limit}"
            return None
        if isinstance(event, ev.RetryScheduled):
            task = self.tasks.get(event.task_id)
            if task is None:
                return None  # the transition checks say so
            worker = self.pipeline.worker(task.role)
            if event.attempt > worker.max_attempts:
                return (
                    f"{event.task_id} retry as attempt {event.attempt}, past max_attempts "
                    f"{worker.max_attempts}"
                )
            expected = next_attempt(worker, task)
            if event.attempt != expected:
                return f"{event.task_id} retried as attempt {event.attempt}, not {expected}"
            return None
        if isinstance(event, (ev.ItemFailed, ev.PhaseCompleted, ev.Delivered)):
            return self._tolerance(event)
        if isinstance(event, ev.BranchTaken) and event.rule is not None:
            rules = self.pipeline.phase(event.phase).next
            if not 1 <= event.rule <= len(rules) or rules[event.rule - 1].goto != event.goto:
                return f"branch to {event.goto!r} by rule {event.rule}, which goes elsewhere"
            bound = rules[event.rule - 1].max_visits
            ran = self.visits.get(event.goto, 0)
            if bound is not None and ran >= bound:
                return f"branch to {event.goto!r} after {ran} visits (max_visits {bound})"
        return None

    def _tolerance(self, event: ev.ItemFailed | ev.PhaseCompleted | ev.Delivered) -> str | None:
        """Never past a tolerance silently: a failed item only within it, a visit complete
        only once every other lane completed, a delivered run within every tolerance."""
        if isinstance(event, ev.Delivered):
            for (phase, visit), failed in sorted(self.failed_items.items()):
                tolerance = self._tolerate(phase)
                count = self.items.get((phase, visit), 0)
                if len(failed) > allowed_failures(tolerance, count):
                    return (
                        f"delivered with {len(failed)} of {count} items of {phase!r} visit "
                        f"{visit} failed, past tolerate {tolerance}"
                    )
            return None
        key = (event.phase, event.visit)
        if isinstance(event, ev.PhaseCompleted):
            failed = self.failed_items.get(key, set())
            if not failed:
                return None
            undone = [
                t.task_id
                for t in self.tasks.values()
                if (t.phase, t.visit) == key
                and t.item not in failed
                and t.status not in ("completed", "item_failed")
            ]
            return f"phase {event.phase!r} completed while {undone} had not" if undone else None
        task = self.tasks.get(event.task_id)
        if task is None or task.item != event.item or (task.phase, task.visit) != key:
            return f"{event.task_id}: a failed item {event.item} of a task not of that lane"
        tolerance = self._tolerate(event.phase)
        if tolerance is None:
            return f"{event.task_id}: a failed item in phase {event.phase!r}, which has no tolerate"
        if (self.phase, self.visits.get(event.phase)) != (event.phase, event.visit):
            return f"{event.task_id}: a failed item of a visit that is not under way"
        if key in self.completed_visits or task.revising:
            return f"{event.task_id}: a failed item after its visit completed, or an edit's re-run"
        worker = self.pipeline.worker(task.role)
        if task.status != "failed" or next_attempt(worker, task) <= worker.max_attempts:
            return f"{event.task_id}: recorded as a failed item while {task.status}, attempts left"
        failed = self.failed_items.get(key, set()) | {event.item}
        count = self.items.get(key, 0)
        allowed = allowed_failures(tolerance, count)
        if len(failed) > allowed:
            return (
                f"tolerance passed silently: {len(failed)} of {count} items of "
                f"{event.phase!r} failed, tolerate {tolerance} allows {allowed}"
            )
        return None

    def _tolerate(self, phase: str) -> int | str | None:
        for_each = self.pipeline.phase(phase).for_each
        return None if for_each is None else for_each.tolerate

    def _past_tolerance(self, lost: OracleTask, reason: str) -> str | None:
        """A run failing because of a fan-out item must be past the tolerance, and say how
        many of how many items failed."""
        tolerance = self._tolerate(lost.phase)
        key = (lost.phase, lost.visit)
        if tolerance is None or lost.item is None or key not in self.items:
            return None
        if (self.phase, self.visits.get(lost.phase)) != key:
            return None  # a re-run of an earlier visit's task: no tolerance covers it
        if key in self.completed_visits or lost.revising:
            return None  # an edit's re-run, or after the visit completed: none covers it
        failed = self.failed_items.get(key, set()) | {lost.item}
        count = self.items[key]
        if len(failed) <= allowed_failures(tolerance, count):
            return (
                f"failed because of {lost.task_id} while tolerate {tolerance} still covered "
                f"{len(failed)} of {count} items"
            )
        if f"{len(failed)} of {count} items failed" not in reason:
            return f"failed past tolerate {tolerance} without saying {len(failed)} of {count}"
        return None

    def lost(self) -> OracleTask | None:
        """The first task (by first dispatch) that failed with no attempt left, leaving out
        those of a fan-out item already recorded failed (the tolerance covers that item: a
        sibling that was running or retrying when it was recorded may still fail for good)."""
        failed = [
            t
            for t in self.tasks.values()
            if t.status == "failed"
            and (t.item is None or t.item not in self.failed_items.get((t.phase, t.visit), ()))
        ]
        for task in sorted(failed, key=lambda t: t.order):
            if next_attempt(self.pipeline.worker(task.role), task) > (
                self.pipeline.worker(task.role).max_attempts
            ):
                return task
        return None

    def _give_up(self, event: ev.Event) -> str | None:
        if self.status != "running" or self.phase is None:
            return None
        lost = self.lost()
        if lost is None:
            return None
        if isinstance(event, (ev.TaskDispatched, ev.RetryScheduled)):
            return f"{event.task_id}: {event.kind} after {lost.task_id} failed for good"
        if isinstance(event, ev.RunFailed):
            since = lost.failed_at if lost.failed_at is not None else float("inf")
            running = [
                t.task_id
                for t in sorted(self.tasks.values(), key=lambda t: t.order)
                if t.status in ("dispatched", "started")
                and t.started_at is not None
                and t.started_at <= since
                and self.pipeline.worker(t.role).pipeline is None
            ]
            if running:
                return f"failed while {running}, started before {lost.task_id} failed, ran"
            return self._past_tolerance(lost, event.reason)
        return None

    # -- the model --------------------------------------------------------------------------

    def _fold(self, event: ev.Event) -> None:
        if isinstance(event, ev.TaskDispatched):
            self._dispatched(event)
        elif isinstance(event, ev.TaskStarted):
            task = self.tasks.get(event.task_id)
            if task is not None and event.attempt == task.attempt:
                task.status, task.started_at = "started", event.at
        elif isinstance(event, (ev.TaskFailed, ev.TaskTimedOut)):
            task = self.tasks.get(event.task_id)
            if task is not None and event.attempt == task.attempt:
                task.status, task.failed_at = "failed", event.at
                task.retryable = event.retryable if isinstance(event, ev.TaskFailed) else True
        elif isinstance(event, ev.RetryScheduled):
            task = self.tasks.get(event.task_id)
            if task is not None:
                task.status, task.attempt = "retry_wait", event.attempt
        elif isinstance(event, (ev.TaskCompleted, ev.TaskReused)):
            self._completed(event)
        elif isinstance(event, ev.ItemFailed):
            task = self.tasks.get(event.task_id)
            if task is not None:
                task.status = "item_failed"
            self.failed_items.setdefault((event.phase, event.visit), set()).add(event.item)
        elif isinstance(event, ev.OutputEdited):
            task = self.tasks.get(event.task_id)
            if task is not None:
                task.sha256, task.edited, task.edit_mark = event.sha256, True, self.seq
                self._output(task)
            self.files[event.artifact] = event.sha256
            self.edits += 1
        elif isinstance(event, ev.Rejected):
            self.status, self.edits = "running", 0
            for task in self.tasks.values():
                task.edit_mark = 0  # the phases visited again read the edited outputs anyway
                if task.status == "retry_wait":
                    task.status = "abandoned"
        else:
            self._run(event)

    def _run(self, event: ev.Event) -> None:
        if isinstance(event, ev.PhaseStarted):
            self.visits[event.phase] = event.visit
            self.phase = event.phase
            if event.items is not None:
                self.items[(event.phase, event.visit)] = len(event.items)
        elif isinstance(event, ev.PhaseCompleted):
            self.completed_visits.add((event.phase, event.visit))
        elif isinstance(event, ev.Paused):
            self.status = "paused"
        elif isinstance(event, (ev.Approved, ev.Resumed)):
            self.status = "running"
        elif isinstance(event, ev.Delivered):
            self.status, self.delivered = "delivered", event
        elif isinstance(event, ev.Archived):
            self.archived = True
        elif isinstance(event, (ev.RunFailed, ev.RunCancelled)):
            self.status = "failed" if isinstance(event, ev.RunFailed) else "cancelled"
            for task in self.tasks.values():
                if task.status in ("dispatched", "started", "retry_wait"):
                    task.status = "abandoned"

    def _dispatched(self, event: ev.TaskDispatched) -> None:
        self.dispatched.add((event.task_id, event.attempt))
        task = self.tasks.get(event.task_id)
        if task is None:
            task = OracleTask(
                task_id=event.task_id,
                role=event.role,
                phase=event.phase,
                visit=event.visit,
                item=event.item,
                order=len(self.tasks),
                first_seq=self.seq,
            )
            self.tasks[event.task_id] = task
        elif task.status == "completed":
            task.revising = True
        task.attempt, task.status, task.dispatch_seq = event.attempt, "dispatched", self.seq
        task.dispatched_at, task.started_at = event.at, None

    def _completed(self, event: ev.TaskCompleted | ev.TaskReused) -> None:
        task = self.tasks.get(event.task_id)
        if task is None or event.attempt != task.attempt:
            return
        task.status, task.artifact, task.sha256 = "completed", event.artifact, event.sha256
        task.edited = False
        if task.revising:
            task.revising, task.edit_mark = False, self.seq
        if isinstance(event, ev.TaskReused):
            task.reused = True
            self.reused.append(event)
        self.files[event.artifact] = event.sha256
        self._output(task)

    def _output(self, task: OracleTask) -> None:
        """What later tasks read: each role's latest visit, one output per item."""
        latest = self.outputs.get(task.role)
        if latest is None or latest[0] != task.visit:
            latest = (task.visit, {})
            self.outputs[task.role] = latest
        latest[1][task.item] = task.task_id

    # -- questions --------------------------------------------------------------------------

    def current(self) -> list[OracleTask]:
        """The tasks whose outputs later tasks read now (each role's latest visit)."""
        found = []
        for _, by_item in self.outputs.values():
            found += [self.tasks[t] for t in by_item.values()]
        return sorted(found, key=lambda t: t.order)

    def inputs(self, task: OracleTask) -> list[OracleTask]:
        """The tasks whose current outputs `task` reads."""
        found = []
        for role in read_roles(self.pipeline, self.pipeline.worker(task.role)):
            _, by_item = self.outputs.get(role, (0, {}))
            found += [self.tasks[t] for t in by_item.values()]
        return found

    def stale(self) -> list[str]:
        """Current outputs made before an input they read was edited (or re-made after an
        edit), each with that input."""
        found = []
        for task in self.current():
            # A task reads the versions there are when it is dispatched: an input first
            # dispatched after that (a later visit of its writer, when the task's phase ran
            # no task since) is one it never read, and its edits leave the task current.
            changed = [
                s
                for s in self.inputs(task)
                if s.first_seq < task.dispatch_seq and s.edit_mark > task.dispatch_seq
            ]
            if task.revising or (changed and task.status == "completed"):
                what = changed[0].artifact if changed else "(its re-run)"
                found.append(f"{task.task_id} read an old version of {what}")
        return found
