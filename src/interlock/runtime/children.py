"""Child runs: how the orchestrator carries out an attempt of a `pipeline` worker.

The attempt starts a child run in the same store (its id derived from the parent, the task
and the attempt, so that a parent resuming after a crash finds the child it had started),
drives it in this orchestrator when nobody else does, and reports what becomes of it: a child
that pauses or waits is recorded on the parent (`ChildUpdated`, and the decision table pauses
the parent), a child that delivers completes the task with its final output and its cost, and
a child that fails or is cancelled fails the attempt (the worker's retries start a new child).
A child that ended before a crash is never run again: its end is read back and reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from interlock.core import events as ev
from interlock.core.loader import Definition
from interlock.core.state import RunState, RunStatus, TaskState, fold, listed_status
from interlock.core.subpipelines import child_run_id
from interlock.errors import InterlockError, LeaseHeld, RunNotFound, StorageError
from interlock.runtime.driver import Report, RunDriver
from interlock.runtime.faults import crash_point
from interlock.storage.base import Store

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator

log = logging.getLogger("interlock.runtime")

USAGE_KEYS = ("cost_usd", "input_tokens", "output_tokens")


class Supervision:
    """One attempt of a `pipeline` worker, watched one look at a time.

    Whoever hosts it (an asyncio task here, or the simulator's loop) calls `step` until it
    returns True, and `stop` when it is cancelled: `begin` once, then `look` until the child
    ended; if the parent ends first, `settle` until the child's spend is reported. Every look
    reports only what changed, so a host may look as often as it likes.
    """

    def __init__(
        self, orchestrator: Orchestrator, driver: RunDriver, task_id: str, attempt: int
    ) -> None:
        self.orchestrator, self.driver = orchestrator, driver
        self.task_id, self.attempt = task_id, attempt
        self.child_id = child_run_id(driver.run_id, task_id, attempt)
        self.shown: tuple[str, str] | None = None  # the status last reported
        self.spent: tuple[float, int] = (0.0, 0)  # the spend last reported
        self.started = False  # the start was reported
        self.begun = False  # the child exists (started here or before)
        self.settling = False  # the parent ended: only the child's spend is left to record
        self.settling_since: float | None = None

    def step(self) -> bool:
        """One look at the child; True when nothing is left to do. A store that is busy
        (locked, a failed read) is tried again at the next look: it fails nothing."""
        try:
            if self.settling:
                return not self.may_settle() or self.settle()
            if not self.begun:
                if not self.begin():
                    return True
                self.begun = True
            return self.look()
        except StorageError as exc:
            log.warning(
                "cannot look at child run %s: %s",
                self.child_id,
                exc,
                extra={"run_id": self.driver.run_id, "action": "child_look_failed"},
            )
            return False
        except Exception as exc:  # a bug here must not stop the loop
            self.fail(exc)
            return True

    def stop(self) -> bool:
        """The host was cancelled: True when the supervision goes on to settle the child's
        spend (the parent ended), False when it stops here (let go, or a stale attempt: the
        child is left to its own lease)."""
        if self.settling or not self.may_settle():
            return False
        self.settling = True
        return True

    def begin(self) -> bool:
        """Report the start and start (or find) the child; False when it cannot be (the
        attempt's failure is reported)."""
        orchestrator, clock = self.orchestrator, self.orchestrator.clock
        if not self.started:
            started = ev.TaskStarted(
                at=clock(), task_id=self.task_id, attempt=self.attempt, worker=orchestrator.owner
            )
            orchestrator.report(self.driver, Report(event=started))
            self.started = True
        task = self.driver.state.tasks[self.task_id]
        refused = _ensure_child(orchestrator, self.driver, task, self.child_id)
        if refused is not None:
            report = _failed(self.task_id, self.attempt, refused, clock(), retryable=False)
            orchestrator.report(self.driver, report)
            return False
        return True

    def look(self) -> bool:
        """Report what changed about the child and drive it when nobody does; True once its
        end is reported (the attempt's result)."""
        orchestrator, driver = self.orchestrator, self.driver
        state = child_state(orchestrator, self.child_id)
        if state.status.ended:
            _tidy(orchestrator, self.child_id, state)
            if state.status is RunStatus.DELIVERED and not state.archived:
                # Reported once archived (its files durable and in place): a parent that
                # recorded the result first would never look at the child again, and a
                # child killed before its move would stay in runs/.
                return False
            crash_point("before_child_result")
            report = _result(orchestrator, self.task_id, self.attempt, self.child_id, state)
            orchestrator.report(driver, report)
            return True
        showing = child_status(state)
        if showing != self.shown:
            self.shown = showing
            update = ev.ChildUpdated(
                at=orchestrator.clock(),
                task_id=self.task_id,
                attempt=self.attempt,
                child_run=self.child_id,
                status=showing[0],
                detail=showing[1],
            )
            orchestrator.report(driver, Report(event=update))
        # The child's spend so far, recorded on the parent so that the parent's budget (and
        # `budget.*` in its conditions) sees it: the parent decides only on its own ledger.
        # At most one record per look, and only when the spend changed.
        spent = (state.cost_usd, state.tokens)
        if spent != self.spent:
            self.spent = spent
            record = ev.ChildSpent(
                at=orchestrator.clock(),
                task_id=self.task_id,
                attempt=self.attempt,
                child_run=self.child_id,
                cost_usd=spent[0],
                tokens=spent[1],
            )
            orchestrator.report(driver, Report(event=record))
        _drive(orchestrator, driver, self.child_id, state)
        return False

    def may_settle(self) -> bool:
        """Whether the parent ended while this orchestrator drives it (not let go)."""
        driver = self.driver
        return driver.state.status.ended and self.orchestrator.drivers.get(driver.run_id) is driver

    def settle(self) -> bool:
        """The parent ended (and asked the child to stop): once the child has ended and
        nothing of it runs here, report what it spent (the parent records it as late usage,
        once); True when done. A child that does not end within `SETTLE_LIMIT` leases is
        reported with what it spent so far."""
        orchestrator = self.orchestrator
        now = orchestrator.clock()
        if self.settling_since is None:
            self.settling_since = now
        try:
            orchestrator.store.get_run(self.child_id)
        except RunNotFound:
            return True  # never started: nothing was spent
        state = child_state(orchestrator, self.child_id)
        limit = SETTLE_LIMIT * orchestrator.settings.lease_ttl
        stopped = state.status.ended and self.child_id not in orchestrator.drivers
        if not stopped and now - self.settling_since < limit:
            return False
        usage = child_usage(orchestrator.store, self.child_id)
        why = f"its parent run {self.driver.run_id} {self.driver.state.status.value}"
        report = _failed(self.task_id, self.attempt, why, now, usage, retryable=False)
        orchestrator.report(self.driver, report)
        return True

    def fail(self, exc: Exception) -> None:
        """A bug while watching the child: fail the attempt rather than the loop. The child
        is asked to stop (a retry starts another) and what it spent so far is charged."""
        driver, orchestrator = self.driver, self.orchestrator
        log.exception("child run of %s crashed", self.task_id, extra={"run_id": driver.run_id})
        error = f"internal error: {type(exc).__name__}: {exc}"
        now = orchestrator.clock()
        usage = None
        with contextlib.suppress(Exception):  # best effort: the failure is reported anyway
            orchestrator.store.get_run(self.child_id)
            usage = child_usage(orchestrator.store, self.child_id)
            why = f"its parent's task {self.task_id} failed: {error}"
            orchestrator.store.post_command(self.child_id, "cancel", why, "interlock", now)
        orchestrator.report(driver, _failed(self.task_id, self.attempt, error, now, usage))

    def close(self) -> None:
        """The host stopped: forget the child here."""
        self.orchestrator.idle_children.discard(self.child_id)


SETTLE_LIMIT = 2  # leases a stopping child may take to end before its spend so far is reported


class ChildHost(Protocol):
    """A dispatcher that runs supervisions itself (the simulator steps them in its loop)."""

    def host_child(self, supervision: Supervision) -> asyncio.Task[None]:
        """Run `supervision` (`step` until it returns True; `stop` when cancelled); the
        returned handle stands in for the asyncio task."""
        ...


def start(orchestrator: Orchestrator, driver: RunDriver, task: TaskState) -> asyncio.Task[None]:
    """Begin the attempt: start (or find) its child run and watch it to its end."""
    supervision = Supervision(orchestrator, driver, task.task_id, task.attempt)
    host = orchestrator.dispatcher
    if hasattr(host, "host_child"):
        return cast(ChildHost, host).host_child(supervision)
    return asyncio.get_running_loop().create_task(_supervise(supervision), name=task.task_id)


def settle_spend(
    orchestrator: Orchestrator, driver: RunDriver, task: TaskState
) -> asyncio.Task[None]:
    """For an ended parent taken again (its supervision died with its process): report what
    the child of the task's current attempt spent, once the child has stopped."""
    supervision = Supervision(orchestrator, driver, task.task_id, task.attempt)
    supervision.settling = True
    host = orchestrator.dispatcher
    if hasattr(host, "host_child"):
        return cast(ChildHost, host).host_child(supervision)
    loop = asyncio.get_running_loop()
    return loop.create_task(_supervise(supervision), name=task.task_id)


async def _supervise(supervision: Supervision) -> None:
    """Host a supervision in an asyncio task: a look whenever the child records something,
    at the latest every heartbeat."""
    orchestrator, driver = supervision.orchestrator, supervision.driver
    wake = orchestrator.watch_run(supervision.child_id)
    try:
        while True:
            try:
                wake.clear()
                if supervision.step():
                    return
                await _nap(orchestrator, wake)
            except asyncio.CancelledError:
                if not supervision.stop():
                    raise
                # The parent ended and asked the child to stop: what the child spent until
                # it stopped is recorded on the parent all the same.
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
    finally:
        orchestrator.unwatch_run(supervision.child_id, wake)
        supervision.close()
        if driver.handles.get(supervision.task_id) is asyncio.current_task():
            del driver.handles[supervision.task_id]


async def _nap(orchestrator: Orchestrator, wake: asyncio.Event) -> None:
    """Until something is recorded for the child, or a heartbeat passed."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(orchestrator.settings.heartbeat):
            await wake.wait()


def _ensure_child(
    orchestrator: Orchestrator, driver: RunDriver, task: TaskState, child_id: str
) -> str | None:
    """Create the child run unless it exists already; why it cannot be, else None."""
    with contextlib.suppress(RunNotFound):
        orchestrator.store.get_run(child_id)
        return None  # started before a crash or a hand-over: go on with it
    worker = driver.definition.pipeline.worker(task.role)
    assert worker.pipeline is not None and worker.pipeline_definition is not None
    request = driver.child_request(task)
    if isinstance(request, str):
        return request
    topic, inputs = request
    file_part = worker.pipeline.rpartition("#")[0]
    source = driver.source
    if file_part and driver.workflow_dir is not None:
        source = str(driver.workflow_dir / file_part)
    definition = Definition.of(worker.child_name, worker.pipeline_definition, source)
    crash_point("before_child_start")
    from interlock.runtime.run_config import config_origin

    origin: dict[str, Any] = {"parent_run": driver.run_id, "parent_task": task.task_id}
    origin.update(config_origin(orchestrator.models, definition))  # what `status` names
    try:
        orchestrator.create_runs([(definition, topic, inputs, child_id)], origin=origin)
    except StorageError:
        raise  # a busy store: tried again at the next look
    except InterlockError as exc:  # inputs the child does not take
        return f"cannot start child pipeline {worker.child_name!r}: {exc.message}"
    crash_point("after_child_start")
    return None


def child_state(orchestrator: Orchestrator, child_id: str) -> RunState:
    """The child's state: live when driven here, else folded from the store."""
    driver = orchestrator.drivers.get(child_id)
    if driver is not None:
        return driver.state
    return fold([s.event for s in orchestrator.store.events(child_id)])


def child_status(state: RunState) -> tuple[str, str]:
    """("running" | "paused" | "waiting", what it waits for) of a child that has not ended."""
    listed = listed_status(state)
    if listed == "paused":
        phase = state.current.phase if state.current else "?"
        detail = f"run {state.run_id} {state.pause_reason or 'paused'} at phase {phase!r}"
        deeper = state.held_by_child("paused")
        return "paused", deeper.detail if deeper is not None and deeper.detail else detail
    if listed == "waiting":
        waiting, deeper = state.waiting, state.held_by_child("waiting")
        if waiting is not None and waiting.signal is not None:
            return "waiting", f"run {state.run_id} waits for signal {waiting.signal!r}"
        if waiting is not None:
            return "waiting", f"run {state.run_id} waits until {waiting.until}"
        return "waiting", deeper.detail if deeper is not None else ""
    return "running", ""


def _drive(orchestrator: Orchestrator, driver: RunDriver, child_id: str, state: RunState) -> None:
    """Take the child when nobody drives it and it has something to do."""
    idle = orchestrator.idle_children
    if child_id in orchestrator.drivers or state.status.ended:
        idle.discard(child_id)
        return
    store = orchestrator.store
    if state.status is RunStatus.PAUSED and not store.pending_commands(child_id):
        # Paused for a person and let go: taken again once an approval is posted to it.
        # The parent, paused because of it, may be let go too.
        if child_id not in idle:
            idle.add(child_id)
            orchestrator.touch(driver)
        return
    idle.discard(child_id)
    with contextlib.suppress(LeaseHeld):  # driven by another orchestrator: watched from here
        orchestrator.take(child_id)


def _tidy(orchestrator: Orchestrator, child_id: str, state: RunState) -> None:
    """A child whose process died before it finished acting on its end is taken once more,
    as `interlock resume` would, so that acting on it finishes that; nothing of it runs
    again. A delivered one may lack final.md or its move to the archive; any ended one the
    outputs its last commit recorded (written after the commit, and a failed or cancelled
    child, never archived, is not resumed by anyone else)."""
    if child_id in orchestrator.drivers:
        return
    live = orchestrator.home.live_dir(child_id)
    if not live.is_dir():
        return
    if state.status is RunStatus.DELIVERED or _outputs_missing(live, state):
        with contextlib.suppress(LeaseHeld):  # its own driver finishes it
            orchestrator.take(child_id)


def _outputs_missing(folder: Path, state: RunState) -> bool:
    """Whether an output the ledger records is not in the run's folder."""
    return any(
        task.artifact is not None
        and task.sha256 is not None
        and not (folder / task.artifact).is_file()
        for task in state.tasks.values()
    )


def _result(
    orchestrator: Orchestrator, task_id: str, attempt: int, child_id: str, state: RunState
) -> Report:
    """The attempt's end, from its child's: its final output, or why it failed."""
    now = orchestrator.clock()
    usage = child_usage(orchestrator.store, child_id)
    if state.status is RunStatus.DELIVERED and state.delivered is not None:
        body = final_body(orchestrator, child_id, state)
        if body is not None:
            done = ev.TaskCompleted(
                at=now,
                task_id=task_id,
                attempt=attempt,
                artifact="",
                sha256="",
                size=0,
                usage=usage,
            )
            return Report(event=done, body=body)
        error = f"child run {child_id} delivered, but its output cannot be read"
        return _failed(task_id, attempt, error, now, usage)
    why = state.failure if state.failure and state.failure != state.status.value else ""
    error = f"child run {child_id} {state.status.value}" + (f": {why}" if why else "")
    # A child a person cancelled is not tried again; a failed one is, as the retries say.
    retryable = state.status is RunStatus.FAILED
    return _failed(task_id, attempt, error, now, usage, retryable=retryable)


def _failed(
    task_id: str,
    attempt: int,
    error: str,
    now: float,
    usage: dict[str, Any] | None = None,
    *,
    retryable: bool = True,
) -> Report:
    failed = ev.TaskFailed(
        at=now, task_id=task_id, attempt=attempt, error=error, usage=usage, retryable=retryable
    )
    return Report(event=failed)


def final_body(orchestrator: Orchestrator, child_id: str, state: RunState) -> bytes | None:
    """The child's delivered output, as recorded (the ledger's copy, else its file)."""
    task = next((t for t in state.tasks.values() if t.artifact == state.delivered), None)
    if task is None or task.sha256 is None or state.delivered is None:
        return None
    body = orchestrator.store.artifact(task.sha256)
    if body is not None:
        return body
    for folder in (orchestrator.home.live_dir(child_id), orchestrator.home.archive_dir(child_id)):
        with contextlib.suppress(OSError):
            return Path(folder, state.delivered).read_bytes()
    return None


def child_usage(store: Store, child_id: str) -> dict[str, Any]:
    """What the child spent, as one usage record: the parent's budget counts it."""
    totals: dict[str, Any] = dict.fromkeys(USAGE_KEYS, 0)
    totals["cost_usd"] = 0.0
    for stored in store.events(child_id):
        usage = getattr(stored.event, "usage", None)
        if not usage:
            continue
        for key in USAGE_KEYS:
            totals[key] += usage.get(key) or 0
    return totals
