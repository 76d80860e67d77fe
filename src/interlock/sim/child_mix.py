"""Sub-pipelines among other features: a parent that fans its child runs out over a list, waits
for a signal or a delay around them, is reviewed (edits, rejections) and rerun.

`python benchmarks/simulate.py --seeds 500 --pipeline children-mixed`. Everything of the
`children` seeds (`sim.child_world`: crashes around child runs, cancelled children, budgets,
every child's history checked by the oracle) holds; on top, the parent's signals are sent as
`sim.signals` plans them, and a person reviews the parent at its own pauses (`sim.review`).
Signals to the child runs themselves are not sent: the people of the simulator act on one run.
Each child run's end is judged by the oracle as a run's is (`sim.outcomes`).
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

from interlock.core.loader import Definition, build_workflow
from interlock.core.state import RunStatus
from interlock.runtime.orchestrator import Orchestrator
from interlock.sim.child_world import RETRY, ChildSimulation
from interlock.sim.invariants import HistoryChecker, end_problems
from interlock.sim.pipelines import ITEMS, _w
from interlock.sim.review import maybe_review
from interlock.sim.shadow import ShadowedChecker
from interlock.sim.signals import SignalPeople
from interlock.sim.world import SimResult

NAME = "children-mixed"


def mixed_flow(rng: random.Random) -> tuple[str, Definition]:
    """A parent whose sub-pipeline worker may run once per item of a list, behind a signal
    or a delay, with reviews after it and a final task that reads what the children made."""
    fan_out = rng.random() < 0.5
    paused_child = rng.random() < 0.3
    child: dict[str, Any] = {
        "phases": [
            {"id": "draft", "workers": [_w("d1", **RETRY), _w("d2")], "pause_after": paused_child},
            {"id": "write", "workers": [_w("w", reads=["d1.md"], final=True, **RETRY)]},
        ]
    }
    delegate: dict[str, Any] = {
        "id": "delegate",
        "workers": [{"role": "sub", "pipeline": "kid", "backoff": {"initial": 0}, **RETRY}],
        "pause_after": rng.random() < 0.6,
    }
    if fan_out:
        delegate["for_each"] = {"items": "planner.items", "concurrency": rng.choice([1, 2])}
    gate = rng.random()
    if gate < 0.3:
        delegate["delay"] = rng.choice([2, 8])
    elif gate < 0.7:
        wait: dict[str, Any] = {"signal": "go", "when": rng.choice(["before", "after"])}
        if wait["when"] == "after" and rng.random() < 0.5:
            wait["timeout"] = 20
        delegate["wait_for"] = wait
    publish = _w("editor", reads=["sub.md"], final=True, **RETRY)
    parent: dict[str, Any] = {
        "phases": [
            {"id": "prep", "workers": [_w("planner", extract=ITEMS, **RETRY)]},
            delegate,
            {"id": "publish", "workers": [publish], "pause_after": rng.random() < 0.3},
        ]
    }
    budget = rng.choice([None, None, "pause"])
    if budget is not None:
        parent["budget"] = {"max_tokens": rng.choice([50, 90]), "on_exceed": budget}
    shape = "-fanout" * fan_out + "-paused" * paused_child + f"-budget-{budget}" * bool(budget)
    name = f"{NAME}{shape}"
    return name, _parent(name, json.dumps({"parent": parent, "kid": child}, sort_keys=True))


@cache
def _parent(name: str, spec_json: str) -> Definition:
    """The parent's definition, validated once per shape per process (it costs more than a
    seed's play)."""
    return build_workflow(json.loads(spec_json), f"<sim:{name}>").get("parent")


class MixedResult(SimResult):
    """A result whose command to play the seed again names its flow."""

    def summary(self) -> dict[str, Any]:
        """See `SimResult.summary`."""
        view = super().summary()
        view["rerun"] = f"python benchmarks/simulate.py --seed {self.seed} --pipeline {NAME}"
        return view


class MixedChildSimulation(ChildSimulation):
    """One seed of `mixed_flow`, with the parent's signals sent and its pauses reviewed."""

    def __init__(self, seed: int, *, faults: bool = True) -> None:
        super().__init__(seed, faults=faults)
        name, self.definition = mixed_flow(random.Random(f"{NAME}-{seed}"))
        self.result = MixedResult(seed=seed, pipeline=name)
        self.checker = ShadowedChecker(self.definition.pipeline)
        self.signal_people = SignalPeople.for_seed(seed, self.definition.pipeline, faults)

    def _people(self, orchestrator: Orchestrator, status: RunStatus) -> None:
        self.signal_people.act(self, orchestrator)
        own = self.checker.shadow.pause_reason in ("pause_after", "budget")
        if status is RunStatus.PAUSED and own and self._reviewed(orchestrator):
            return
        super()._people(orchestrator, status)

    def _reviewed(self, orchestrator: Orchestrator) -> bool:
        if any(
            c.kind in ("approve", "edit", "reject")
            for c in self.store.pending_commands(self.run_id)
        ):
            return False
        return maybe_review(self, orchestrator, self.review_rng)

    def _finish(self) -> None:
        """Besides the checks of `children`: each child run's end judged by the oracle too
        (its files, its delivered output, what its workers ran)."""
        super()._finish()
        pipeline = self.definition.pipeline.worker("sub").pipeline_definition
        assert pipeline is not None and self.home is not None
        executions, starts = self.dispatcher.executions, self.dispatcher.starts
        for child_id in self._child_ids():
            checker = HistoryChecker(pipeline)
            for record in self.store.events(child_id):
                checker.feed(record.seq, record.event)
            run_dir = self.home.run_dir(child_id)
            problems = end_problems(checker, child_id, run_dir, executions, starts)
            self.result.violations += [f"child {child_id}: {p}" for p in problems]
