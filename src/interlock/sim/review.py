"""Reviews in the simulator: at a pause, a person sometimes edits an output or rejects.

Drawn from a random stream of their own, so that whether a seed reviews does not move the
draws of everything else. What the outputs to edit are is the oracle's answer (`sim.oracle`),
not the engine's; the checks a review adds are the oracle's too: an edit or a rejection is
recorded only while the run is paused; a completed task is dispatched again only after an
edit; a rejection ends the pause it was made at; and a delivered run leaves no task that read
an edited output without running it again.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from interlock.core.review import EditRequest, RejectRequest

if TYPE_CHECKING:
    from interlock.runtime.orchestrator import Orchestrator
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
    now = sim.clock()
    oracle = sim.checker.oracle
    if rng.random() < 0.5:
        tasks = sorted(
            (t for t in oracle.current() if t.status == "completed"), key=lambda t: t.task_id
        )
        if not tasks:
            return False
        task = rng.choice(tasks)
        body = sim.store.artifact(task.sha256 or "")
        if body is None:
            return False
        text = body.decode("utf-8", "replace")
        number = sim.buggify.fired["review_edit"] + 1
        if sim.definition.pipeline.worker(task.role).extract:
            text += "\n" * number  # new bytes that extract the same values
        else:
            text += f"\nedited at review {number}\n"
        request = EditRequest(output=task.artifact or "", body=text, note="sim")
        sim.store.post_command(sim.run_id, "edit", request.to_message(), "sim", now)
        sim.buggify.fired["review_edit"] += 1
    else:
        ran = [p.id for p in sim.definition.pipeline.phases if oracle.visits.get(p.id, 0)]
        reject = RejectRequest(to=rng.choice(ran), feedback="sim: again")
        sim.store.post_command(sim.run_id, "reject", reject.to_message(), "sim", now)
        sim.buggify.fired["review_reject"] += 1
    orchestrator.wake()
    return True
