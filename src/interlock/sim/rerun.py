"""Reruns in the simulator: after a seed's run ended, rerun it under the same faults.

The rerun (from a random phase, or none) is played step by step like the first run, with
crashes (the reuse crash points included), failed and ambiguous commits, duplicate reports.
Beyond the invariants every history keeps, a rerun must leave its source's history as it was,
reuse each task at most once and never also run it, reuse only tasks that completed in the
source with the same output hash, and hold every reused output on disk with that hash.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from interlock.core import events as ev
from interlock.core.state import RunState, fold
from interlock.sim.shadow import ShadowedChecker
from interlock.storage.base import Store

if TYPE_CHECKING:
    from interlock.sim.world import Simulation

RERUN_PROBABILITY = 0.35  # of a seed whose run ended; drawn after the run, so it changes nothing


def _digest(store: Store, run_id: str) -> str:
    records = store.events(run_id)
    text = json.dumps([(s.kind, s.data, s.rule, s.why) for s in records], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def maybe_rerun(sim: Simulation) -> None:
    """With some probability, rerun the seed's ended run and check what reuse promises."""
    store = sim.store
    source = sim.run_id
    source_state = fold([s.event for s in store.events(source)])
    if not source_state.status.ended or sim.rng.random() >= RERUN_PROBABILITY:
        return
    phases = [p.id for p in sim.definition.pipeline.phases]
    from_phase = sim.rng.choice([None, *phases])
    # With `cache:` on, half the seeds start the same topic again as a new run instead: what it
    # reuses comes through the cache (from the ended run), with the promises of a rerun's.
    fresh = sim.definition.pipeline.cache is not None and sim.rng.random() < 0.5
    before = _digest(store, source)
    sim.result.reruns += 1
    sim.run_id = f"{source}-rerun"
    sim.checker = ShadowedChecker(sim.definition.pipeline)
    orchestrator = sim.orchestrator
    assert orchestrator is not None
    sim.creating = True
    orchestrator.create_run(
        sim.definition,
        topic=source_state.topic,
        inputs=dict(source_state.inputs),
        run_id=sim.run_id,
        rerun_of=None if fresh else source,
        rerun_from=None if fresh else from_phase,
    )
    sim.creating = False
    first_digest = sim.result.digest
    if not sim.play_steps():
        return
    sim.finish()
    sim.result.digest = hashlib.sha256(f"{first_digest}/{sim.result.digest}".encode()).hexdigest()
    history = [s.event for s in store.events(sim.run_id)]
    made = {
        (s.event.task_id, s.event.sha256)
        for s in store.events(source)
        if isinstance(s.event, (ev.TaskCompleted, ev.TaskReused))
    }
    sim.result.violations += reuse_problems(
        history, source_state, None if fresh else from_phase, made
    )
    sim.result.reused += sum(isinstance(e, ev.TaskReused) for e in history)
    if _digest(store, source) != before:
        sim.result.violations.append(f"the rerun changed the history of its source {source}")


def reuse_problems(
    history: list[ev.Event],
    source: RunState,
    from_phase: str | None,
    made: set[tuple[str, str]] | None = None,
) -> list[str]:
    """What a rerun's history must never show about its reuses. A reuse through the cache
    carries an output as its task completed it (`made`: the source's (task, sha256) of each
    completion), even where a person edited it since; one of a rerun, the source's latest."""
    problems = []
    reused: dict[str, ev.TaskReused] = {}
    ran: set[str] = set()
    entered_from = edited = False
    for event in history:
        if isinstance(event, ev.PhaseStarted) and event.phase == from_phase:
            entered_from = True
        if isinstance(event, ev.TaskReused):
            if event.task_id in reused:
                problems.append(f"{event.task_id} reused twice")
            reused[event.task_id] = event
            if entered_from:
                problems.append(f"{event.task_id} reused at or after --from {from_phase!r}")
            done = source.tasks.get(event.source_task)
            cached = event.via == "cache" and (event.source_task, event.sha256) in (made or set())
            if not cached and (done is None or done.sha256 != event.sha256):
                problems.append(
                    f"{event.task_id} reused an output the source never completed as recorded"
                )
        elif isinstance(event, ev.OutputEdited):
            edited = True  # from here on, a reused task that read the edit runs again
        elif isinstance(event, (ev.TaskStarted, ev.TaskCompleted)) and not edited:
            ran.add(event.task_id)
    for task_id in sorted(set(reused) & ran):
        problems.append(f"{task_id} was both reused and run")
    return problems
