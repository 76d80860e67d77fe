"""Reviews in the simulator: at a pause, a person sometimes edits an output or rejects.

Drawn from a random stream of their own, so that whether a seed reviews does not move the
draws of everything else. The checks a review adds: an edit or a rejection is recorded only
while the run is paused; a completed task is dispatched again only after an edit; a rejection
ends the pause it was made at; and a delivered run leaves no task that read an edited output
without running it again.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from interlock.core import events as ev
from interlock.core.review import EditRequest, RejectRequest, latest_outputs, revisions
from interlock.core.state import RunState, RunStatus
from interlock.core.workflow import Pipeline

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator
    from interlock.sim.invariants import HistoryChecker
    from interlock.sim.world import Simulation

REVIEW_PROBABILITY = 0.3  # of each pause a person acts on


def review_rng(seed: int) -> random.Random:
    """The stream reviews draw from."""
    return random.Random(f"review-{seed}")


def maybe_review(sim: Simulation, orchestrator: Orchestrator, rng: random.Random) -> bool:
    """Perhaps post an edit or a rejection for the paused run; True when one was posted."""
    driver = orchestrator.drivers.get(sim.run_id)
    if driver is None or rng.random() >= REVIEW_PROBABILITY:
        return False
    state = driver.state
    now = sim.clock()
    if rng.random() < 0.5:
        tasks = sorted(latest_outputs(state), key=lambda t: t.task_id)
        if not tasks:
            return False
        task = rng.choice(tasks)
        body = sim.store.artifact(task.sha256 or "")
        if body is None:
            return False
        text = body.decode("utf-8", "replace")
        if not sim.definition.pipeline.worker(task.role).extract:
            text += f"\nedited at review {sim.buggify.fired['review_edit'] + 1}\n"
        request = EditRequest(output=task.artifact or "", body=text, note="sim")
        sim.store.post_command(sim.run_id, "edit", request.to_message(), "sim", now)
        sim.buggify.fired["review_edit"] += 1
    else:
        ran = [p.id for p in sim.definition.pipeline.phases if state.visits.get(p.id, 0)]
        reject = RejectRequest(to=rng.choice(ran), feedback="sim: again")
        sim.store.post_command(sim.run_id, "reject", reject.to_message(), "sim", now)
        sim.buggify.fired["review_reject"] += 1
    orchestrator.wake()
    return True


def review_transition(checker: HistoryChecker, event: ev.OutputEdited | ev.Rejected) -> str | None:
    """Check an edit or a rejection against the history so far."""
    if not checker.paused:
        return f"{event.kind} recorded while the run was not paused"
    if isinstance(event, ev.Rejected):
        checker.paused = False
        checker.edited = False
        return None
    task = checker.tasks.get(event.task_id)
    if task is None or task.status != "completed":
        return f"{event.task_id}: edited while {task.status if task else 'never dispatched'}"
    checker.edited = True
    return None


def review_end_problems(state: RunState, pipeline: Pipeline) -> list[str]:
    """A delivered run holds no task that read an edited output and did not run again."""
    if state.status is not RunStatus.DELIVERED or not state.revisions:
        return []
    running = state.copy()
    running.status = RunStatus.RUNNING
    ready, pending = revisions(pipeline, running)
    if pending:
        stale = [t.task_id for t, _ in ready] or ["(in flight)"]
        return [f"delivered while {stale} read an edited output and did not run again"]
    return []
