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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from interlock.core import events as ev
from interlock.core.loader import Definition
from interlock.core.state import RunState, RunStatus, fold, listed_status
from interlock.core.subpipelines import child_run_id
from interlock.errors import InterlockError, LeaseHeld, RunNotFound, StorageError
from interlock.runtime.faults import crash_point
from interlock.runtime.home import Home
from interlock.runtime.reports import Report
from interlock.storage.base import Store

log = logging.getLogger("interlock.runtime")

USAGE_KEYS = ("cost_usd", "input_tokens", "output_tokens")


@dataclass(frozen=True, kw_only=True)
class ChildStart:
    """The child run an attempt creates: its pipeline, its topic and its inputs."""

    name: str  # the child pipeline's name, as its worker gives it
    definition: Definition
    topic: str
    inputs: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ChildRequest:
    """One attempt of a `pipeline` worker, as its supervision knows it: values, and the few
    calls it makes on its parent, never the parent's driver."""

    parent_run: str
    task_id: str
    attempt: int
    worker: str  # who reports the attempt's start (the orchestrator's lease owner)
    # The child to create, or why it cannot be (its task or inputs do not render): asked
    # only when the child does not exist yet, from the parent's state at that moment. None
    # for a supervision that only settles a child's spend.
    child: Callable[[], ChildStart | str] | None
    report: Callable[[Report], None]  # hands a report to the parent's next tick
    # The parent's end status while this orchestrator still drives it, else None (not
    # ended, or let go).
    parent_ended: Callable[[], str | None]
    touch_parent: Callable[[], None]  # look at the parent again at the next tick
    ended: Callable[[object], None]  # the host's handle ended: the parent no longer runs it


@dataclass(frozen=True, kw_only=True)
class ChildPorts:
    """What supervisions use of the orchestrator that drives parents and children: its
    store and home, its clock, and a few calls, shared by every supervision."""

    store: Store
    home: Home
    clock: Callable[[], float]
    lease_ttl: float
    # Child runs paused for a person and driven by no one: their parents may be let go.
    idle: set[str]
    live_state: Callable[[str], RunState | None]  # a run's state, when driven here
    take: Callable[[str], object]  # drive a run here; raises LeaseHeld when held elsewhere
    # Create the child run (its id, its origin); raises InterlockError for inputs it does
    # not take, StorageError for a busy store.
    create: Callable[[ChildStart, str, dict[str, Any]], None]


class Supervision:
    """One attempt of a `pipeline` worker, watched one look at a time.

    Whoever hosts it (an asyncio task here, or the simulator's loop) calls `step` until it
    returns True, and `stop` when it is cancelled: `begin` once, then `look` until the child
    ended; if the parent ends first, `settle` until the child's spend is reported. Every look
    reports only what changed, so a host may look as often as it likes.
    """

    def __init__(self, request: ChildRequest, ports: ChildPorts) -> None:
        self.request, self.ports = request, ports
        self.task_id, self.attempt = request.task_id, request.attempt
        self.child_id = child_run_id(request.parent_run, request.task_id, request.attempt)
        self.shown: tuple[str, str] | None = None  # the status last reported
        self.spent: tuple[float, int] = (0.0, 0)  # the spend last reported
        self.started = False  # the start was reported
        self.begun = False  # the child exists (started here or before)
        self.settling = request.child is None  # the parent ended: only the spend is left
        self.settling_since: float | None = None

    def step(self) -> bool:
        """One look at the child; True when nothing is left to do. A store that is busy
        (locked, a failed read) is tried again at the next look: it fails nothing."""
        try:
            if self.settling:
                ended = self.request.parent_ended()
                return ended is None or self.settle(ended)
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
                extra={"run_id": self.request.parent_run, "action": "child_look_failed"},
            )
            return False
        except Exception as exc:  # a bug here must not stop the loop
            self.fail(exc)
            return True

    def stop(self) -> bool:
        """The host was cancelled: True when the supervision goes on to settle the child's
        spend (the parent ended), False when it stops here (let go, or a stale attempt: the
        child is left to its own lease)."""
        if self.settling or self.request.parent_ended() is None:
            return False
        self.settling = True
        return True

    def begin(self) -> bool:
        """Report the start and start (or find) the child; False when it cannot be (the
        attempt's failure is reported)."""
        request, clock = self.request, self.ports.clock
        if not self.started:
            started = ev.TaskStarted(
                at=clock(), task_id=self.task_id, attempt=self.attempt, worker=request.worker
            )
            request.report(Report(event=started))
            self.started = True
        refused = _ensure_child(self.ports, request, self.child_id)
        if refused is not None:
            request.report(_failed(self.task_id, self.attempt, refused, clock(), retryable=False))
            return False
        return True

    def look(self) -> bool:
        """Report what changed about the child and drive it when nobody does; True once its
        end is reported (the attempt's result)."""
        ports, request = self.ports, self.request
        state = child_state(ports, self.child_id)
        if state.status.ended:
            _tidy(ports, self.child_id, state)
            if state.status is RunStatus.DELIVERED and not state.archived:
                # Reported once archived (its files durable and in place): a parent that
                # recorded the result first would never look at the child again, and a
                # child killed before its move would stay in runs/.
                return False
            crash_point("before_child_result")
            request.report(_result(ports, self.task_id, self.attempt, self.child_id, state))
            return True
        showing = child_status(state)
        if showing != self.shown:
            self.shown = showing
            update = ev.ChildUpdated(
                at=ports.clock(),
                task_id=self.task_id,
                attempt=self.attempt,
                child_run=self.child_id,
                status=showing[0],
                detail=showing[1],
            )
            request.report(Report(event=update))
        # The child's spend so far, recorded on the parent so that the parent's budget (and
        # `budget.*` in its conditions) sees it: the parent decides only on its own ledger.
        # At most one record per look, and only when the spend changed.
        spent = (state.cost_usd, state.tokens)
        if spent != self.spent:
            self.spent = spent
            record = ev.ChildSpent(
                at=ports.clock(),
                task_id=self.task_id,
                attempt=self.attempt,
                child_run=self.child_id,
                cost_usd=spent[0],
                tokens=spent[1],
            )
            request.report(Report(event=record))
        _drive(ports, request, self.child_id, state)
        return False

    def settle(self, parent_status: str) -> bool:
        """The parent ended (and asked the child to stop): once the child has ended and
        nothing of it runs here, report what it spent (the parent records it as late usage,
        once); True when done. A child that does not end within `SETTLE_LIMIT` leases is
        reported with what it spent so far."""
        ports = self.ports
        now = ports.clock()
        if self.settling_since is None:
            self.settling_since = now
        try:
            ports.store.get_run(self.child_id)
        except RunNotFound:
            return True  # never started: nothing was spent
        state = child_state(ports, self.child_id)
        limit = SETTLE_LIMIT * ports.lease_ttl
        stopped = state.status.ended and ports.live_state(self.child_id) is None
        if not stopped and now - self.settling_since < limit:
            return False
        usage = child_usage(ports.store, self.child_id)
        why = f"its parent run {self.request.parent_run} {parent_status}"
        self.request.report(_failed(self.task_id, self.attempt, why, now, usage, retryable=False))
        return True

    def fail(self, exc: Exception) -> None:
        """A bug while watching the child: fail the attempt rather than the loop. The child
        is asked to stop (a retry starts another) and what it spent so far is charged."""
        ports, request = self.ports, self.request
        log.exception("child run of %s crashed", self.task_id, extra={"run_id": request.parent_run})
        error = f"internal error: {type(exc).__name__}: {exc}"
        now = ports.clock()
        usage = None
        with contextlib.suppress(Exception):  # best effort: the failure is reported anyway
            ports.store.get_run(self.child_id)
            usage = child_usage(ports.store, self.child_id)
            why = f"its parent's task {self.task_id} failed: {error}"
            ports.store.post_command(self.child_id, "cancel", why, "interlock", now)
        request.report(_failed(self.task_id, self.attempt, error, now, usage))

    def close(self, handle: object) -> None:
        """The host stopped `handle`, which ran this supervision: forget the child here."""
        self.ports.idle.discard(self.child_id)
        self.request.ended(handle)


SETTLE_LIMIT = 2  # leases a stopping child may take to end before its spend so far is reported


@runtime_checkable
class ChildHost(Protocol):
    """Runs supervisions: an asyncio task each (`interlock.runtime.child_runs`), or the
    simulator's loop, which steps them itself."""

    def host_child(self, supervision: Supervision) -> asyncio.Task[None]:
        """Run `supervision` (`step` until it returns True; `stop` when cancelled; `close`
        when done); the returned handle stands in for an asyncio task."""
        ...


def _ensure_child(ports: ChildPorts, request: ChildRequest, child_id: str) -> str | None:
    """Create the child run unless it exists already; why it cannot be, else None."""
    with contextlib.suppress(RunNotFound):
        ports.store.get_run(child_id)
        return None  # started before a crash or a hand-over: go on with it
    assert request.child is not None  # a supervision that only settles never begins
    child = request.child()
    if isinstance(child, str):
        return child
    crash_point("before_child_start")
    origin: dict[str, Any] = {"parent_run": request.parent_run, "parent_task": request.task_id}
    try:
        ports.create(child, child_id, origin)
    except StorageError:
        raise  # a busy store: tried again at the next look
    except InterlockError as exc:  # inputs the child does not take
        return f"cannot start child pipeline {child.name!r}: {exc.message}"
    crash_point("after_child_start")
    return None


def child_state(ports: ChildPorts, child_id: str) -> RunState:
    """The child's state: live when driven here, else folded from the store."""
    state = ports.live_state(child_id)
    if state is not None:
        return state
    return fold([s.event for s in ports.store.events(child_id)])


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


def _drive(ports: ChildPorts, request: ChildRequest, child_id: str, state: RunState) -> None:
    """Take the child when nobody drives it and it has something to do."""
    idle = ports.idle
    if ports.live_state(child_id) is not None or state.status.ended:
        idle.discard(child_id)
        return
    if state.status is RunStatus.PAUSED and not ports.store.pending_commands(child_id):
        # Paused for a person and let go: taken again once an approval is posted to it.
        # The parent, paused because of it, may be let go too.
        if child_id not in idle:
            idle.add(child_id)
            request.touch_parent()
        return
    idle.discard(child_id)
    with contextlib.suppress(LeaseHeld):  # driven by another orchestrator: watched from here
        ports.take(child_id)


def _tidy(ports: ChildPorts, child_id: str, state: RunState) -> None:
    """A child whose process died before it finished acting on its end is taken once more,
    as `interlock resume` would, so that acting on it finishes that; nothing of it runs
    again. A delivered one may lack final.md or its move to the archive; any ended one the
    outputs its last commit recorded (written after the commit, and a failed or cancelled
    child, never archived, is not resumed by anyone else)."""
    if ports.live_state(child_id) is not None:
        return
    live = ports.home.live_dir(child_id)
    if not live.is_dir():
        return
    if state.status is RunStatus.DELIVERED or _outputs_missing(live, state):
        with contextlib.suppress(LeaseHeld):  # its own driver finishes it
            ports.take(child_id)


def _outputs_missing(folder: Path, state: RunState) -> bool:
    """Whether an output the ledger records is not in the run's folder."""
    return any(
        task.artifact is not None
        and task.sha256 is not None
        and not (folder / task.artifact).is_file()
        for task in state.tasks.values()
    )


def _result(
    ports: ChildPorts, task_id: str, attempt: int, child_id: str, state: RunState
) -> Report:
    """The attempt's end, from its child's: its final output, or why it failed."""
    now = ports.clock()
    usage = child_usage(ports.store, child_id)
    if state.status is RunStatus.DELIVERED and state.delivered is not None:
        body = final_body(ports.store, ports.home, child_id, state)
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


def final_body(store: Store, home: Home, child_id: str, state: RunState) -> bytes | None:
    """The child's delivered output, as recorded (the ledger's copy, else its file)."""
    task = next((t for t in state.tasks.values() if t.artifact == state.delivered), None)
    if task is None or task.sha256 is None or state.delivered is None:
        return None
    body = store.artifact(task.sha256)
    if body is not None:
        return body
    for folder in (home.live_dir(child_id), home.archive_dir(child_id)):
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
