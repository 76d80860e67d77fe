"""The orchestrator's side of child runs: it starts the supervision of a `pipeline` worker's
attempt (`interlock.runtime.children`) and hosts it, asks the children of an ended parent to
stop, and brings a child's parent along when the child is taken.

A supervision is handed a `ChildRequest` (values, and calls bound to its parent) and the
`ChildPorts` shared by all of them; it never sees the orchestrator or the parent's driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from interlock.core.loader import Definition
from interlock.core.state import RunState, TaskState
from interlock.core.subpipelines import child_run_id
from interlock.errors import LeaseHeld, RunNotFound, StorageError
from interlock.runtime.children import ChildHost, ChildPorts, ChildRequest, ChildStart, Supervision
from interlock.runtime.driver import RunDriver
from interlock.runtime.home import Home
from interlock.runtime.models import ModelRunner
from interlock.runtime.reports import Report
from interlock.runtime.task_specs import child_request
from interlock.storage.base import ENDED_STATUSES, Store

log = logging.getLogger("interlock.runtime")


class LocalChildHost:
    """Hosts each supervision in an asyncio task: a look whenever the child records something,
    at the latest every heartbeat."""

    def __init__(self, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        self._watched: dict[str, list[asyncio.Event]] = {}  # child runs that parents watch

    def host_child(self, supervision: Supervision) -> asyncio.Task[None]:
        """See `ChildHost.host_child`."""
        coroutine = self._supervise(supervision)
        return asyncio.get_running_loop().create_task(coroutine, name=supervision.task_id)

    def recorded(self, run_id: str) -> None:
        """Something was recorded for `run_id`: wake the supervisions watching it."""
        for event in self._watched.get(run_id, ()):
            event.set()

    async def _supervise(self, supervision: Supervision) -> None:
        wake = asyncio.Event()
        watchers = self._watched.setdefault(supervision.child_id, [])
        watchers.append(wake)
        try:
            while True:
                try:
                    wake.clear()
                    if supervision.step():
                        return
                    await self._nap(wake)
                except asyncio.CancelledError:
                    if not supervision.stop():
                        raise
                    # The parent ended and asked the child to stop: what the child spent
                    # until it stopped is recorded on the parent all the same.
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
        finally:
            watchers.remove(wake)
            if not watchers:
                self._watched.pop(supervision.child_id, None)
            supervision.close(asyncio.current_task())

    async def _nap(self, wake: asyncio.Event) -> None:
        """Until something is recorded for the child, or a heartbeat passed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.heartbeat):
                await wake.wait()


class ChildRuns:
    """The child runs of the runs one orchestrator drives.

    Given what it needs of the orchestrator as values and calls: the store and home, the clock,
    the lease ttl and heartbeat, its owner and model runner, the runs it drives (`drivers`),
    `take` and `create_runs`, and how a run is handed a report (`report`), looked at again
    (`touch`, `mark`), or the commands looked at now (`look_now`). `host` runs supervisions
    when it is a `ChildHost` (a dispatcher that hosts them itself, as the simulator's does);
    else each gets an asyncio task.
    """

    def __init__(
        self,
        *,
        store: Store,
        home: Home,
        clock: Callable[[], float],
        lease_ttl: float,
        heartbeat: float,
        owner: str,
        models: ModelRunner,
        drivers: Mapping[str, RunDriver],
        take: Callable[[str], object],
        create_runs: Callable[..., object],
        report: Callable[[RunDriver, Report], None],
        touch: Callable[[RunDriver], None],
        mark: Callable[[RunDriver], None],
        look_now: Callable[[], None],
        host: object = None,
    ) -> None:
        self.owner, self.models, self.drivers = owner, models, drivers
        self._create_runs = create_runs
        self._report, self._touch, self._mark, self._look_now = report, touch, mark, look_now
        self.local = LocalChildHost(heartbeat)
        self.host: ChildHost = host if isinstance(host, ChildHost) else self.local
        self.ports = ChildPorts(
            store=store,
            home=home,
            clock=clock,
            lease_ttl=lease_ttl,
            idle=set(),
            live_state=self._live_state,
            take=take,
            create=self._create,
        )

    def _live_state(self, run_id: str) -> RunState | None:
        driver = self.drivers.get(run_id)
        return None if driver is None else driver.state

    @property
    def idle(self) -> set[str]:
        """Child runs paused for a person and driven by no one."""
        return self.ports.idle

    def start(self, driver: RunDriver, task: TaskState) -> asyncio.Task[None]:
        """Begin the attempt: start (or find) its child run and watch it to its end."""
        return self.host.host_child(Supervision(self.request(driver, task), self.ports))

    def settle_spend(self, driver: RunDriver, task: TaskState) -> asyncio.Task[None]:
        """For an ended parent taken again (its supervision died with its process): report
        what the child of the task's current attempt spent, once the child has stopped."""
        request = self.request(driver, task, settling=True)
        return self.host.host_child(Supervision(request, self.ports))

    def request(
        self, driver: RunDriver, task: TaskState, *, settling: bool = False
    ) -> ChildRequest:
        """What the supervision of `task`'s current attempt is told of its parent."""
        run_id, task_id = driver.run_id, task.task_id

        def parent_ended() -> str | None:
            if driver.state.status.ended and self.drivers.get(run_id) is driver:
                return driver.state.status.value
            return None

        def ended(handle: object) -> None:
            if driver.workers.handles.get(task_id) is handle:
                del driver.workers.handles[task_id]

        return ChildRequest(
            parent_run=run_id,
            task_id=task_id,
            attempt=task.attempt,
            worker=self.owner,
            child=None if settling else lambda: child_start(driver, task_id),
            report=lambda report: self._report(driver, report),
            parent_ended=parent_ended,
            touch_parent=lambda: self._touch(driver),
            ended=ended,
        )

    def _create(self, child: ChildStart, child_id: str, origin: dict[str, Any]) -> None:
        from interlock.runtime.run_config import config_origin

        origin = {**origin, **config_origin(self.models, child.definition)}  # what `status` names
        self._create_runs([(child.definition, child.topic, child.inputs, child_id)], origin=origin)

    def recorded(self, run_id: str) -> None:
        """Something was recorded for `run_id`: its parent's supervision looks at it."""
        self.local.recorded(run_id)

    def held_by_idle(self, driver: RunDriver, task: TaskState) -> bool:
        """A run paused by its child holds only the child's task: it is let go with it."""
        if driver.definition.pipeline.worker(task.role).pipeline is None:
            return False
        return child_run_id(driver.run_id, task.task_id, task.attempt) in self.idle

    def take_parent(self, parent_id: str, child_id: str) -> None:
        """A child run taken here: drive its parent too (resuming either resumes both); a
        child whose parent ended (it was cancelled while no one drove the child) is
        cancelled."""
        store = self.ports.store
        try:
            record = store.get_run(parent_id)
        except RunNotFound:
            return
        if record.summary.status in ENDED_STATUSES:
            self.cancel(child_id, f"its parent run {parent_id} {record.summary.status}")
            return
        if parent_id not in self.drivers:
            with contextlib.suppress(LeaseHeld):  # driven elsewhere: it watches the child
                self.ports.take(parent_id)

    def cancel_children(self, driver: RunDriver) -> bool:
        """Ask every child run of an ended run that has not ended to stop (once per run);
        False when the store was busy: the run is looked at again to finish that."""
        pipeline = driver.definition.pipeline
        done = True
        for task in driver.state.tasks.values():
            if pipeline.worker(task.role).pipeline is None or task.status.value == "completed":
                continue
            child_id = child_run_id(driver.run_id, task.task_id, task.attempt)
            try:
                self._stop_child(driver, task, child_id)
            except StorageError as exc:  # a locked database: tried again at the next look
                log.warning("cannot stop child run: %s", exc, extra={"run_id": child_id})
                done = False
        if not done:
            self._mark(driver)
        return done

    def _stop_child(self, driver: RunDriver, task: TaskState, child_id: str) -> None:
        try:
            record = self.ports.store.get_run(child_id)
        except RunNotFound:
            return
        if task.attempt not in task.charged and task.task_id not in driver.workers.handles:
            self._settle_child(driver, task)
        if record.summary.status in ENDED_STATUSES:
            return
        reason = f"its parent run {driver.run_id} {driver.state.status.value}"
        self.cancel(child_id, reason)
        if child_id not in self.drivers:
            with contextlib.suppress(LeaseHeld):  # its driver elsewhere records it
                self.ports.take(child_id)  # paused and let go: recorded here

    def _settle_child(self, driver: RunDriver, task: TaskState) -> None:
        """An ended run taken again whose child's spend is not recorded yet (the process that
        watched the child died): record it once the child has stopped."""
        handle = self.settle_spend(driver, task)
        driver.workers.handles[task.task_id] = handle
        driver.workers.stopping.add(task.task_id)  # not cancelled with the others: it must report
        handle.add_done_callback(lambda _: self._touch(driver))

    def cancel(self, child_id: str, reason: str) -> None:
        """Post a cancellation to a child run, unless one is waiting already."""
        store = self.ports.store
        if any(c.kind == "cancel" for c in store.pending_commands(child_id)):
            return
        store.post_command(child_id, "cancel", reason, "interlock", self.ports.clock())
        self._look_now()


def child_start(driver: RunDriver, task_id: str) -> ChildStart | str:
    """The child run the current attempt of `task_id` creates (its `task` and `inputs`
    rendered from the parent's state now), or why it cannot be."""
    task = driver.state.tasks[task_id]
    pipeline = driver.definition.pipeline
    worker = pipeline.worker(task.role)
    assert worker.pipeline is not None and worker.pipeline_definition is not None
    rendered = child_request(pipeline, driver.state, task)
    if isinstance(rendered, str):
        return rendered
    topic, inputs = rendered
    file_part = worker.pipeline.rpartition("#")[0]
    source = driver.source
    if file_part and driver.workflow_dir is not None:
        source = str(driver.workflow_dir / file_part)
    definition = Definition.of(worker.child_name, worker.pipeline_definition, source)
    return ChildStart(name=worker.child_name, definition=definition, topic=topic, inputs=inputs)
