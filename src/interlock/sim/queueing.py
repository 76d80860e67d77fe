"""Simulated waits before a start: a slot that frees late, a dispatch that is lost.

A dispatched attempt may wait for a free slot far longer than its timeout (a phase wider
than the concurrency), or never start at all (a queue or transport dropped it). Both are drawn
from their own generator, seeded by the seed: a seed that has them switched off draws exactly
what it drew before they existed, so every earlier seed replays unchanged.
"""

from __future__ import annotations

import random
from collections import Counter

from interlock.core.workflow import Worker

QUEUE_POINTS = (
    "slot_wait",  # the attempt waits past its timeout + grace for a slot, then starts
    "lost_dispatch",  # the attempt never starts: only its start_timeout ends it
)


class QueueFaults:
    """Decides, per seed and attempt, how long an attempt waits before it starts."""

    def __init__(self, seed: int, *, faults: bool = True) -> None:
        self.rng = random.Random(f"queue/{seed}")
        self.enabled = {point: faults and self.rng.random() < 0.3 for point in QUEUE_POINTS}
        self.fired: Counter[str] = Counter()

    def _fires(self, point: str, probability: float) -> bool:
        if not self.enabled[point] or self.rng.random() >= probability:
            return False
        self.fired[point] += 1
        return True

    def wait(self, worker: Worker) -> float | None:
        """Seconds the attempt waits before its start (None: it never starts)."""
        if self._fires("lost_dispatch", 0.1):
            return None
        if self._fires("slot_wait", 0.3):
            # Past the attempt's own timeout + grace, well within its start_timeout: counted
            # from the dispatch, this attempt would be timed out without ever having run.
            low = worker.timeout + worker.grace
            return self.rng.uniform(low, max(low, 0.8 * worker.start_deadline))
        return 0.0
