"""Simulated workers: a dispatcher whose attempts complete, fail, hang or answer late.

Outcomes are drawn from the seed and delivered through the real `Orchestrator.report` at
simulated times. Completions write a real temporary output and go through the runtime's own
`attempt_report`, so extraction and the atomic commit are the real code.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import json
import random
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from interlock.core import events as ev
from interlock.core.workflow import Worker
from interlock.runtime.children import Supervision
from interlock.runtime.dispatch import Attempt, attempt_report
from interlock.runtime.driver import RunDriver
from interlock.runtime.executors import Outcome
from interlock.runtime.reports import Report
from interlock.sim.buggify import Buggify
from interlock.sim.children import ChildHosting
from interlock.sim.clock import SimClock
from interlock.sim.outcomes import READ_KEY
from interlock.sim.queueing import QueueFaults

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)


class Scheduler:
    """Actions due at simulated times, run in time order (ties in scheduling order)."""

    def __init__(self) -> None:
        self._heap: list[_Due] = []
        self._seq = 0

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run `action` once the clock reaches `when`."""
        self._seq += 1
        heapq.heappush(self._heap, _Due(when, self._seq, action))

    def next_time(self) -> float | None:
        """When the earliest action is due (None: nothing scheduled)."""
        return self._heap[0].at if self._heap else None

    def run_due(self, now: float) -> None:
        """Run every action due by `now`."""
        while self._heap and self._heap[0].at <= now:
            heapq.heappop(self._heap).action()

    def clear(self) -> None:
        """Forget everything (the processes that would have acted are gone)."""
        self._heap.clear()


class SimHandle:
    """Stands in for the asyncio task of one running attempt."""

    def __init__(self, task_id: str, attempt: int) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.cancelled = False
        self.finished = False

    def cancel(self) -> bool:
        """Stop the attempt: it will report nothing more."""
        self.cancelled = True
        return True

    def done(self) -> bool:
        """Like `asyncio.Task.done`: cancelling a simulated attempt stops it at once."""
        return not self.live

    @property
    def live(self) -> bool:
        """Still running: neither finished nor cancelled."""
        return not (self.cancelled or self.finished)


@dataclass
class SentReport:
    """A terminal report already sent, kept so a fault can send it again later."""

    run_id: str
    event: ev.TaskCompleted | ev.TaskFailed | ev.TaskTimedOut
    content: str | None  # the output text of a completion


class SimDispatcher:
    """A `Dispatcher` whose workers are simulated."""

    def __init__(
        self,
        rng: random.Random,
        clock: SimClock,
        scheduler: Scheduler,
        buggify: Buggify,
        queue: QueueFaults | None = None,
    ) -> None:
        self.rng = rng
        self.clock = clock
        self.scheduler = scheduler
        self.buggify = buggify
        self.queue = queue or QueueFaults(0, faults=False)
        self.handles: list[SimHandle] = []
        self.sent: list[SentReport] = []
        # Every real start of an attempt, counted where it happens (not where it is recorded):
        # by (run, task, attempt), and by the process that started it too.
        self.executions: Counter[tuple[str, str, int]] = Counter()
        self.starts: Counter[tuple[str, str, int, str]] = Counter()
        self.children = ChildHosting()  # supervisions of child runs, stepped by the world
        self._serial = 0

    def host_child(self, supervision: Supervision) -> asyncio.Task[None]:
        """See `runtime.children.ChildHost`: the world steps it in its loop."""
        return cast("asyncio.Task[None]", self.children.host(supervision))

    def withdraw(self, run_id: str) -> None:
        """See `Dispatcher.withdraw`: a simulated start already scheduled happens (what a
        queue's worker that claimed the attempt meanwhile would do)."""

    def submit(self, attempt: Attempt) -> asyncio.Task[None]:
        """See `Dispatcher.submit`: schedule the attempt's start and its outcome."""
        run_id, task_id, number, worker = (
            attempt.run_id,
            attempt.task_id,
            attempt.attempt,
            attempt.worker,
        )
        handle = SimHandle(task_id, number)
        self.handles.append(handle)
        self.executions[(run_id, task_id, number)] += 1
        self.starts[(run_id, task_id, number, attempt.runner)] += 1
        read = read_inputs(attempt.run_dir, worker)  # what a worker sees when it starts
        now = self.clock()
        started = ev.TaskStarted(at=now, task_id=task_id, attempt=number, worker=attempt.runner)

        def report_start() -> None:
            if handle.live:
                attempt.report(Report(event=started))

        waits = self.queue.wait(worker)
        if waits is None:
            return cast("asyncio.Task[None]", handle)  # lost before it started: never runs
        begins = now + waits + self.rng.uniform(0, 0.2)  # a start is reported before the end
        self.scheduler.at(begins, report_start)
        if self.buggify("hang", 0.15):
            return cast("asyncio.Task[None]", handle)  # never answers; the engine times it out
        deadline = worker.timeout + worker.grace
        if self.buggify("late_completion", 0.2):
            duration = deadline + self.rng.uniform(0.5, 20)
        else:
            duration = self.rng.uniform(0.1, min(worker.timeout * 0.8, 20.0))
        self.scheduler.at(begins + duration, lambda: self._finish(attempt, handle, read))
        return cast("asyncio.Task[None]", handle)

    def _finish(self, attempt: Attempt, handle: SimHandle, read: dict[str, str]) -> None:
        if not handle.live:
            return
        handle.finished = True
        attempt.ended(handle)  # as the real dispatcher does when its task ends
        run_id, task_id, number = attempt.run_id, attempt.task_id, attempt.attempt
        now = self.clock()
        report: Report
        if self.buggify("worker_fail", 0.3):
            event: ev.TaskFailed = ev.TaskFailed(
                at=now, task_id=task_id, attempt=number, error="simulated failure"
            )
            report = Report(event=event)
        elif self.buggify("worker_fail_permanent", 0.1):
            event = ev.TaskFailed(
                at=now,
                task_id=task_id,
                attempt=number,
                error="simulated permanent failure",
                retryable=False,
            )
            report = Report(event=event)
        else:
            content = self._output(attempt.worker, read)
            usage = simulated_usage(run_id, task_id, number)
            if zlib.crc32(f"{run_id}/{task_id}".encode()) % 2:
                # Half the workers hand their output over in memory, as `call:` workers do:
                # it is recorded with the completion and written into the run afterwards.
                outcome = Outcome(ok=True, body=content.encode(), usage=usage)
                tmp = attempt.run_dir / ".tmp" / "unused"
            else:
                outcome = Outcome(ok=True, usage=usage)
                tmp = self._write_tmp(attempt.run_dir, task_id, number, content)
            report = attempt_report(attempt.worker, task_id, number, outcome, tmp, now)
            if isinstance(report.event, ev.TaskCompleted):
                self.sent.append(SentReport(run_id, report.event, content))
        if not isinstance(report.event, ev.TaskCompleted):
            assert not isinstance(
                report.event,
                (ev.TaskStarted, ev.TaskReused, ev.ChildUpdated, ev.ChildSpent, ev.TaskBatchWaited),
            )
            self.sent.append(SentReport(run_id, report.event, None))
        attempt.report(report)

    def _output(self, worker: Worker, read: dict[str, str]) -> str:
        """A worker's output: JSON holding a value for each of its `extract` rules, and the
        SHA-256 of each input file it read (`sim.outcomes` checks them)."""
        values: dict[str, Any] = {}
        for name, rule in worker.extract.items():
            if rule.type == "number":
                values[name] = round(self.rng.uniform(5, 10), 1)
            elif rule.type == "bool":
                values[name] = self.rng.random() < 0.5
            elif rule.type == "list":
                values[name] = [f"item {i}" for i in range(self.rng.randint(0, 3))]
            else:
                values[name] = f"text {self.rng.randint(0, 99)}"
        if values and self.buggify("bad_output", 0.2):
            values.pop(next(iter(values)))  # a required value is missing: extraction fails
        if worker.reads:
            values[READ_KEY] = read
        return json.dumps(values)

    def _write_tmp(self, run_dir: Path, task_id: str, attempt: int, content: str) -> Path:
        self._serial += 1
        tmp = run_dir / ".tmp" / f"{task_id}.{attempt}.{self._serial}.part"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(content, encoding="utf-8")
        return tmp

    def resend(self, orchestrator: Orchestrator, driver: RunDriver, *, stale: bool) -> bool:
        """Send an old report of this run again (a duplicate, or a superseded attempt's)."""
        mine = [s for s in self.sent if s.run_id == driver.run_id]
        if stale:
            mine = [
                s
                for s in mine
                if s.event.task_id in driver.state.tasks
                and driver.state.tasks[s.event.task_id].attempt > s.event.attempt
            ]
        if not mine:
            return False
        sent = self.rng.choice(mine)
        tmp = None
        if sent.content is not None:
            tmp = self._write_tmp(driver.run_dir, sent.event.task_id, 0, sent.content)
        orchestrator.report(driver, Report(event=sent.event, tmp=tmp))
        return True

    def kill_all(self) -> None:
        """The orchestrator died: every worker it started dies with it."""
        for handle in self.handles:
            handle.cancel()
        self.handles.clear()
        self.children.kill_all()


def read_inputs(run_dir: Path, worker: Worker) -> dict[str, str]:
    """The files a worker reads, as they are on disk now: for each `reads` name, every item's
    file of the latest visit there is (`name.ITEM.vVISIT.ext`), by file name -> SHA-256."""
    read: dict[str, str] = {}
    for entry in worker.reads:
        stem, dot, ext = entry.rstrip("?").rpartition(".")
        if not dot:
            stem, ext = entry.rstrip("?"), ""
        shape = re.compile(rf"{re.escape(stem)}(?:\.\d+)?(?:\.v(\d+))?{re.escape(dot + ext)}")
        found: dict[int, list[Path]] = {}
        for path in run_dir.glob(f"{stem}*{dot}{ext}"):
            match = shape.fullmatch(path.name)
            if match is not None:
                found.setdefault(int(match.group(1) or 1), []).append(path)
        if found:
            for path in sorted(found[max(found)]):
                read[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return dict(sorted(read.items()))


def simulated_usage(run_id: str, task_id: str, attempt: int) -> dict[str, int]:
    """What a completed attempt reports spending: 2-41 tokens, derived from its identity
    rather than drawn, so that adding it changed no seed's other draws."""
    tokens = 2 + zlib.crc32(f"{run_id}/{task_id}/{attempt}".encode()) % 40
    return {"input_tokens": tokens // 2, "output_tokens": tokens - tokens // 2}
