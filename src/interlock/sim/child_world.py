"""Seeds of a parent that runs a sub-pipeline: crashes and people around its child runs.

`python benchmarks/simulate.py --seeds 2000 --pipeline children`. The parent and every child
run are driven by the same simulated orchestrator; besides the simulator's usual faults a
seed may crash the orchestrator while a child runs, while a child is paused for approval, or
at the child crash points of `runtime.children` (before a child starts, after, and after a
child ended before its parent recorded the result), and may cancel a running child.

Invariants, besides every run's own (`invariants`, checked on each child's history too): a
child records nothing that runs after it ended; the parent records exactly one result per
child attempt (matching how the child ended) unless the parent ended first; and what each
child spent is counted once in its parent, running totals settled, whatever ended first.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from typing import Any

from interlock.core import events as ev
from interlock.core.loader import Definition, build_workflow
from interlock.core.state import RunState, RunStatus, fold
from interlock.core.subpipelines import child_run_id
from interlock.errors import RunNotFound
from interlock.runtime.orchestrator import Orchestrator
from interlock.sim.invariants import HistoryChecker
from interlock.sim.pipelines import _w
from interlock.sim.shadow import ShadowedChecker
from interlock.sim.signals import SignalPeople
from interlock.sim.world import SimCrash, Simulation

CHILD_POINTS = ("before_child_start", "after_child_start", "before_child_result")
CHILD_FAULTS = (
    "crash_child_points",  # the orchestrator dies at a crash point of `runtime.children`
    "crash_child_running",  # the orchestrator dies while a child runs
    "crash_child_paused",  # the orchestrator dies while a child waits for its approval
    "cancel_child",  # a person cancels a running child run
)
RETRY: dict[str, Any] = {"retries": 1, "backoff": {"initial": 0}}
AFTER_END = (ev.Archived, ev.UsageRecorded, ev.MessageNoted, ev.Warned)


def flow(rng: random.Random) -> tuple[str, Definition]:
    """A parent with a sub-pipeline worker (retried once) and a child that spends; some
    children pause for approval, some parents have a budget the child's spend crosses."""
    paused = rng.random() < 0.4
    budget = rng.choice([None, None, "fail", "pause"])
    child: dict[str, Any] = {
        "phases": [
            {"id": "draft", "workers": [_w("d1", **RETRY), _w("d2")], "pause_after": paused},
            {"id": "write", "workers": [_w("w", reads=["d1.md"], final=True, **RETRY)]},
        ]
    }
    parent: dict[str, Any] = {
        "phases": [
            {"id": "prep", "workers": [_w("a")]},
            {
                "id": "delegate",
                "workers": [
                    {"role": "sub", "pipeline": "kid", "retries": 1, "final": True,
                     "backoff": {"initial": 0}},
                ],
            },
        ]
    }  # fmt: skip
    if budget is not None:
        parent["budget"] = {"max_tokens": rng.randint(25, 70), "on_exceed": budget}
    name = f"children{'-paused' * paused}{f'-budget-{budget}' * (budget is not None)}"
    workflow = build_workflow({"parent": parent, "kid": child}, f"<sim:{name}>")
    return name, workflow.get("parent")


class ChildSimulation(Simulation):
    """One seed of the `children` flow, with the faults and checks of child runs."""

    def __init__(self, seed: int, *, faults: bool = True) -> None:
        super().__init__(seed, pipeline="parallel", faults=faults)
        self.child_rng = random.Random(f"children-{seed}")
        name, self.definition = flow(self.child_rng)
        self.result.pipeline = name
        self.checker = ShadowedChecker(self.definition.pipeline)
        self.signal_people = SignalPeople.for_seed(seed, self.definition.pipeline, faults)
        self.leave_paused = False  # a parent held by its child is approved in the end
        self.buggify.fired.pop("leave_paused", None)
        self.child_faults = {p: faults and self.child_rng.random() < 0.5 for p in CHILD_FAULTS}
        self.ended_runs: dict[str, int] = {}  # child run -> executions when it ended
        self.crash_pending: str | None = None  # a crash drawn by the people, due next

    def _child_fault(self, point: str, probability: float) -> bool:
        if not self.child_faults[point] or self.child_rng.random() >= probability:
            return False
        self.buggify.fired[point] += 1
        return True

    def _before_iterate(self) -> None:
        if self.crash_pending is not None:
            name, self.crash_pending = self.crash_pending, None
            raise SimCrash(name)  # inside the step: the dead orchestrator does nothing more

    def _crash_hook(self, name: str) -> None:
        if name in CHILD_POINTS and self._child_fault("crash_child_points", 0.3):
            self.buggify.fired[f"crash_child_points:{name}"] += 1
            raise SimCrash(name)
        super()._crash_hook(name)

    # -- people and crashes around the children ----------------------------------------------

    def _children(self) -> list[RunState]:
        """The states of the child runs the parent started (folded from the store)."""
        found = []
        for child in self._child_ids():
            found.append(fold([s.event for s in self.store.events(child)]))
        return found

    def _child_ids(self) -> list[str]:
        state = self.checker.shadow
        ids = []
        for task in sorted(state.tasks.values(), key=lambda t: t.order):
            if self.definition.pipeline.worker(task.role).pipeline is None:
                continue
            for attempt in range(1, task.attempt + 1):
                child = child_run_id(self.run_id, task.task_id, attempt)
                try:
                    self.store.get_run(child)
                except RunNotFound:
                    continue
                ids.append(child)
        return ids

    def _people(self, orchestrator: Orchestrator, status: RunStatus) -> None:
        store, now = self.store, self.clock()
        if self.buggify("cancel", 0.005) and not status.ended:
            store.post_command(self.run_id, "cancel", "simulated cancel", "sim", now)
        children = self._children()
        running = [c for c in children if not c.status.ended]
        if running and self._child_fault("cancel_child", 0.01):
            store.post_command(running[0].run_id, "cancel", "simulated cancel", "sim", now)
        if any(c.status is RunStatus.PAUSED for c in running):
            if self._child_fault("crash_child_paused", 0.3):
                self.crash_pending = "child paused"
                return
        elif running and self._child_fault("crash_child_running", 0.02):
            self.crash_pending = "child running"
            return
        # Approvals, as `interlock approve` gives them: to a paused child (the parent goes on
        # with it), or to the parent paused for itself (a budget pause).
        for run in [*running, self.checker.shadow]:
            if run.status is not RunStatus.PAUSED or run.pause_reason == "child":
                continue
            if any(c.kind == "approve" for c in store.pending_commands(run.run_id)):
                continue
            if self.child_rng.random() < 0.5:
                continue  # people take their time
            copies = 2 if self.buggify("double_approval", 0.5) else 1
            for _ in range(copies):
                store.post_command(run.run_id, "approve", "ok", "sim", now)
            orchestrator.wake()

    def _done(self, state: RunState) -> bool:
        """An ended parent let go before its child's spend was recorded (its lease was lost
        while the child stopped) is taken again, as `interlock resume` would: that records it."""
        return super()._done(state) and not any(
            task.attempt not in task.charged
            and self.definition.pipeline.worker(task.role).pipeline is not None
            and self._spent(child_run_id(self.run_id, task.task_id, task.attempt))
            for task in state.tasks.values()
        )

    def _spent(self, run_id: str) -> bool:
        """Whether the run exists and spent anything (nothing spent: nothing to record)."""
        return fold([s.event for s in self.store.events(run_id)]).tokens > 0

    def _advance(self, orchestrator: Orchestrator) -> bool:
        waiting = [c for c in self._children() if c.status is RunStatus.PAUSED]
        if waiting and not orchestrator.busy and self.scheduler.next_time() is None:
            self.clock.advance_to(self.clock() + 1)  # somebody will approve the child
            return True
        if super()._advance(orchestrator):
            return True
        if not self.dispatcher.children.handles:
            return False
        # A supervision looks at its child at least every heartbeat on its own (a child
        # nobody drives yet is taken by that look): the clock moves on to it.
        self.clock.advance_to(self.clock() + orchestrator.settings.heartbeat)
        return True

    def _check_step(self) -> None:
        super()._check_step()
        for child in self._children():
            if not child.status.ended:
                continue
            ran = sum(
                n for (run, _, _), n in self.dispatcher.executions.items() if run == child.run_id
            )
            before = self.ended_runs.setdefault(child.run_id, ran)
            if ran != before:
                self.result.violations.append(
                    f"child run {child.run_id} started work after it ended ({before} -> {ran})"
                )

    # -- the end -------------------------------------------------------------------------------

    def _finish(self) -> None:
        super()._finish()
        parent = fold([s.event for s in self.store.events(self.run_id)])
        history = [s.event for s in self.store.events(self.run_id)]
        problems: list[str] = []
        spent: Counter[str] = Counter()  # task id -> what its children spent
        expected = self._child_ids()
        for extra in sorted(set(self.store.find_runs(f"{self.run_id}-c")) - set(expected)):
            problems.append(f"child run {extra} is no attempt's child: a child started twice?")
        for child_id in expected:
            records = self.store.events(child_id)
            child = fold([s.event for s in records])
            problems += _child_history(child_id, [s.event for s in records], self)
            task_id = child.parent_task or ""
            attempt = _attempt(parent, task_id, child_id)
            spent[task_id] += child.tokens
            problems += _results(parent, history, child, task_id, attempt)
        if parent.status.ended:
            for task in parent.tasks.values():
                if self.definition.pipeline.worker(task.role).pipeline is None:
                    continue
                if task.tokens != spent[task.task_id]:
                    problems.append(
                        f"{task.task_id} counts {task.tokens} tokens, its children spent "
                        f"{spent[task.task_id]}"
                    )
                if task.child_spend:
                    problems.append(f"{task.task_id} keeps running totals {task.child_spend}")
        self.result.violations += problems
        # One digest for the parent and its children: equal digests, equal runs of all.
        for child_id in expected:
            records = self.store.events(child_id)
            text = json.dumps([(r.kind, r.data, r.rule, r.why) for r in records], sort_keys=True)
            joined = f"{self.result.digest}/{text}"
            self.result.digest = hashlib.sha256(joined.encode()).hexdigest()


def _attempt(parent: RunState, task_id: str, child_id: str) -> int:
    task = parent.tasks.get(task_id)
    for attempt in range(1, (task.attempt if task else 0) + 1):
        if child_run_id(parent.run_id, task_id, attempt) == child_id:
            return attempt
    return 0


def _child_history(child_id: str, history: list[ev.Event], sim: ChildSimulation) -> list[str]:
    """The child's own invariants, and nothing but bookkeeping after its end."""
    problems = []
    pipeline = sim.definition.pipeline.worker("sub").pipeline_definition
    assert pipeline is not None
    checker = HistoryChecker(pipeline)
    for seq, event in enumerate(history, 1):
        checker.feed(seq, event)
    problems += [f"child {child_id}: {p}" for p in checker.problems]
    ended = False
    for event in history:
        if ended and not isinstance(event, AFTER_END):
            problems.append(f"child {child_id}: {event.kind} recorded after it ended")
        ended = ended or isinstance(event, (ev.Delivered, ev.RunFailed, ev.RunCancelled))
    return problems


def _results(
    parent: RunState, history: list[ev.Event], child: RunState, task_id: str, attempt: int
) -> list[str]:
    """One result per child attempt, matching how the child ended; its spend charged once."""
    where = f"{task_id} attempt {attempt} (child {child.run_id})"
    results = [
        e
        for e in history
        if isinstance(e, (ev.TaskCompleted, ev.TaskFailed, ev.TaskTimedOut))
        and e.task_id == task_id
        and e.attempt == attempt
    ]
    late = [
        e
        for e in history
        if isinstance(e, ev.UsageRecorded) and e.task_id == task_id and e.attempt == attempt
    ]
    problems = []
    if len(results) > 1:
        problems.append(f"{where}: {len(results)} results recorded")
    if len(late) + sum(1 for r in results if getattr(r, "usage", None)) > 1:
        problems.append(f"{where}: its spend was charged more than once")
    if results and child.status.ended:
        completed = isinstance(results[0], ev.TaskCompleted)
        if completed != (child.status is RunStatus.DELIVERED):
            problems.append(f"{where}: {results[0].kind} for a child that {child.status.value}")
    if not results and child.status.ended:
        ended_first = parent.status in (RunStatus.FAILED, RunStatus.CANCELLED)
        if not ended_first:
            problems.append(f"{where}: the child {child.status.value}, the parent has no result")
    if not child.status.ended and parent.status.ended:
        problems.append(f"{where}: the child is {child.status.value} after its parent ended")
    return problems
